data "aws_ami" "broker" {
  count       = var.ami_id == "" ? 1 : 0
  owners      = var.ami_owners
  most_recent = true

  filter {
    name   = "tag:mqlab:broker"
    values = [var.broker]
  }

  dynamic "filter" {
    for_each = var.flake_rev == "" ? [] : [var.flake_rev]
    content {
      name   = "tag:mqlab:flake-rev"
      values = [filter.value]
    }
  }
}

locals {
  ami_id = var.ami_id != "" ? var.ami_id : data.aws_ami.broker[0].id
  zones  = length(var.subnet_ids)
  private_ips = [
    for i in range(var.node_count) : cidrhost(var.subnet_cidrs[i % local.zones], 10 + i)
  ]
  user_data = [
    for i in range(var.node_count) : templatefile("${path.module}/templates/node.sh.tftpl", {
      node = jsonencode({
        format_version = 1
        lab_id         = var.lab_id
        broker         = var.broker
        role           = "broker"
        index          = i
        node_count     = var.node_count
        private_ip     = local.private_ips[i]
        peers          = local.private_ips
      })
    })
  ]
  tags = merge({ Project = "mqlab" }, var.tags, {
    "mqlab:lab"        = var.lab_id
    "mqlab:broker"     = var.broker
    "mqlab:role"       = "broker"
    "mqlab:expires-at" = var.expires_at
  })
}

resource "aws_instance" "broker" {
  count                  = var.node_count
  ami                    = local.ami_id
  instance_type          = var.instance_type
  subnet_id              = var.subnet_ids[count.index % local.zones]
  private_ip             = local.private_ips[count.index]
  vpc_security_group_ids = var.security_group_ids
  key_name               = var.key_name
  placement_group        = var.placement_group
  ebs_optimized          = true

  user_data = local.user_data[count.index]

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
    tags                  = merge(local.tags, { Name = "${var.lab_id}-broker-${count.index}" })
  }

  tags = merge(local.tags, {
    Name          = "${var.lab_id}-broker-${count.index}"
    "mqlab:index" = tostring(count.index)
  })
}
