output "senders" {
  description = "Sender nodes in index order: index, instance id, private and public IP."
  value = [
    for i in range(var.sender_count) : {
      index       = i
      instance_id = aws_instance.client["sender-${i}"].id
      private_ip  = aws_instance.client["sender-${i}"].private_ip
      public_ip   = aws_instance.client["sender-${i}"].public_ip
    }
  ]
}

output "receivers" {
  description = "Receiver nodes in index order: index, instance id, private and public IP."
  value = [
    for i in range(var.receiver_count) : {
      index       = i
      instance_id = aws_instance.client["receiver-${i}"].id
      private_ip  = aws_instance.client["receiver-${i}"].private_ip
      public_ip   = aws_instance.client["receiver-${i}"].public_ip
    }
  ]
}
