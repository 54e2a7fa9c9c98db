locals {
  common_tags = {
    "Project"          = "mqlab"
    "mqlab:lab"        = var.lab_id
    "mqlab:broker"     = var.broker
    "mqlab:expires-at" = var.expires_at
  }
}

resource "aws_key_pair" "lab" {
  key_name   = "${var.lab_id}-key"
  public_key = var.ssh_public_key
  tags       = merge(local.common_tags, { "mqlab:role" = "access" })
}

module "network" {
  source = "../../modules/network"

  lab_id                  = var.lab_id
  vpc_cidr                = var.vpc_cidr
  availability_zones      = var.availability_zones
  availability_zone_names = var.availability_zone_names
  operator_cidr           = var.operator_cidr
  placement_group         = var.placement_group
  tags                    = local.common_tags
}

module "brokers" {
  source = "../../modules/broker_cluster"

  lab_id             = var.lab_id
  broker             = var.broker
  node_count         = var.broker_count
  instance_type      = var.broker_instance_type
  ami_id             = var.ami_id
  flake_rev          = var.flake_rev
  subnet_ids         = module.network.subnet_ids
  subnet_cidrs       = module.network.subnet_cidrs
  security_group_ids = module.network.security_group_ids
  key_name           = aws_key_pair.lab.key_name
  ebs_type           = var.ebs_type
  ebs_size_gb        = var.ebs_size_gb
  placement_group    = module.network.placement_group
  expires_at         = var.expires_at
  tags               = local.common_tags
}

module "clients" {
  source = "../../modules/client_fleet"

  lab_id             = var.lab_id
  broker             = var.broker
  sender_count       = var.sender_count
  receiver_count     = var.receiver_count
  instance_type      = var.client_instance_type
  ami_id             = var.client_ami_id != "" ? var.client_ami_id : module.brokers.ami_id
  broker_ips         = module.brokers.private_ips
  subnet_ids         = module.network.subnet_ids
  security_group_ids = module.network.security_group_ids
  key_name           = aws_key_pair.lab.key_name
  ebs_type           = var.ebs_type
  ebs_size_gb        = var.ebs_size_gb
  placement_group    = module.network.placement_group
  expires_at         = var.expires_at
  tags               = local.common_tags
}
