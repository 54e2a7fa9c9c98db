output "ami_id" {
  description = "AMI the broker nodes boot."
  value       = local.ami_id
}

output "nodes" {
  description = "Broker nodes in index order: index, instance id, private and public IP."
  value = [
    for i, inst in aws_instance.broker : {
      index       = i
      instance_id = inst.id
      private_ip  = inst.private_ip
      public_ip   = inst.public_ip
    }
  ]
}

output "private_ips" {
  description = "Private IPs of the broker nodes in index order (fixed before boot)."
  value       = local.private_ips
}
