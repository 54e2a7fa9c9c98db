output "vpc_id" {
  description = "ID of the lab's VPC."
  value       = aws_vpc.lab.id
}

output "subnet_ids" {
  description = "Subnet IDs, one per availability zone, in zone order."
  value       = aws_subnet.lab[*].id
}

output "subnet_cidrs" {
  description = "Subnet CIDR blocks, in the same order as subnet_ids."
  value       = aws_subnet.lab[*].cidr_block
}

output "availability_zones" {
  description = "Availability zone names used, in subnet order."
  value       = local.zones
}

output "security_group_ids" {
  description = "Security groups every node joins (SSH from the operator, internal ports)."
  value       = [aws_security_group.ssh.id, aws_security_group.internal.id]
}

output "placement_group" {
  description = "Name of the cluster placement group, or null when none was asked for."
  value       = var.placement_group ? aws_placement_group.lab[0].name : null
}
