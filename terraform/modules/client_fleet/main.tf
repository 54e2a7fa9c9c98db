locals {
  zones = length(var.subnet_ids)
  nodes = concat(
    [for i in range(var.sender_count) : { key = "sender-${i}", role = "sender", index = i }],
    [for i in range(var.receiver_count) : { key = "receiver-${i}", role = "receiver", index = i }],
  )
  user_data = {
    for n in local.nodes : n.key => templatefile("${path.module}/templates/node.sh.tftpl", {
      node = jsonencode({
        format_version = 1
        lab_id         = var.lab_id
        broker         = var.broker
        role           = n.role
        index          = n.index
        brokers        = var.broker_ips
      })
    })
  }
  tags = merge({ Project = "mqlab" }, var.tags, {
    "mqlab:lab"        = var.lab_id
    "mqlab:broker"     = var.broker
    "mqlab:expires-at" = var.expires_at
  })
}

resource "aws_instance" "client" {
  for_each               = { for n in local.nodes : n.key => n }
  ami                    = var.ami_id
  instance_type          = var.instance_type
  subnet_id              = var.subnet_ids[each.value.index % local.zones]
  vpc_security_group_ids = var.security_group_ids
  key_name               = var.key_name
  placement_group        = var.placement_group
  ebs_optimized          = true

  user_data = local.user_data[each.key]

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = var.ebs_type
    volume_size           = var.ebs_size_gb
    delete_on_termination = true
    encrypted             = true
    tags                  = merge(local.tags, { Name = "${var.lab_id}-${each.key}", "mqlab:role" = each.value.role })
  }

  tags = merge(local.tags, {
    Name          = "${var.lab_id}-${each.key}"
    "mqlab:role"  = each.value.role
    "mqlab:index" = tostring(each.value.index)
  })
}
