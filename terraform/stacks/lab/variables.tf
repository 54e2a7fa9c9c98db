variable "format_version" {
  description = "Version of the variables file mqlab writes from a scenario (terraform.tfvars.json)."
  type        = number
  default     = 1

  validation {
    condition     = var.format_version == 1
    error_message = "This stack reads variables files of format_version 1; upgrade mqlab or the lab."
  }
}

variable "lab_id" {
  description = "Identifier of the lab (mqlab derives it from the scenario); prefixes names, tags everything."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$", var.lab_id))
    error_message = "lab_id must be 2-40 characters of lowercase letters, digits and dashes."
  }
}

variable "region" {
  description = "AWS region of the lab."
  type        = string
  default     = "eu-west-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must be an AWS region name such as eu-west-1."
  }
}

variable "aws_endpoint" {
  description = "Override URL for the EC2 and STS APIs (an emulator such as moto_server); empty for real AWS."
  type        = string
  default     = ""

  validation {
    condition     = var.aws_endpoint == "" || can(regex("^https?://", var.aws_endpoint))
    error_message = "aws_endpoint must be empty or an http(s) URL."
  }
}

variable "broker" {
  description = "Broker under test (e.g. nats); selects the AMI by its mqlab:broker tag."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9_-]{0,31}$", var.broker))
    error_message = "broker must be a lowercase name such as nats, rabbitmq or postgres."
  }
}

variable "broker_count" {
  description = "Number of identical broker nodes."
  type        = number
  default     = 3

  validation {
    condition     = var.broker_count >= 1 && var.broker_count <= 15 && floor(var.broker_count) == var.broker_count
    error_message = "broker_count must be a whole number from 1 to 15."
  }
}

variable "broker_instance_type" {
  description = "EC2 instance type of the broker nodes."
  type        = string
  default     = "r5.2xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.broker_instance_type))
    error_message = "broker_instance_type must look like FAMILY.SIZE, for example r5.2xlarge."
  }
}

variable "client_instance_type" {
  description = "EC2 instance type of the sender and receiver nodes."
  type        = string
  default     = "r5.2xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.client_instance_type))
    error_message = "client_instance_type must look like FAMILY.SIZE, for example r5.2xlarge."
  }
}

variable "sender_count" {
  description = "Number of sender nodes."
  type        = number
  default     = 1

  validation {
    condition     = var.sender_count >= 0 && var.sender_count <= 64 && floor(var.sender_count) == var.sender_count
    error_message = "sender_count must be a whole number from 0 to 64."
  }
}

variable "receiver_count" {
  description = "Number of receiver nodes."
  type        = number
  default     = 1

  validation {
    condition     = var.receiver_count >= 0 && var.receiver_count <= 64 && floor(var.receiver_count) == var.receiver_count
    error_message = "receiver_count must be a whole number from 0 to 64."
  }
}

variable "availability_zones" {
  description = "Number of availability zones (1 as in the published tests)."
  type        = number
  default     = 1

  validation {
    condition     = var.availability_zones >= 1 && var.availability_zones <= 6 && floor(var.availability_zones) == var.availability_zones
    error_message = "availability_zones must be a whole number from 1 to 6."
  }
}

variable "availability_zone_names" {
  description = "Explicit availability zone names (optional)."
  type        = list(string)
  default     = []
}

variable "vpc_cidr" {
  description = "IPv4 CIDR block of the lab's VPC."
  type        = string
  default     = "10.42.0.0/16"
}

variable "operator_cidr" {
  description = "CIDR allowed to SSH into the nodes (your address as a /32). Required; 0.0.0.0/0 is refused."
  type        = string

  validation {
    condition     = can(cidrhost(var.operator_cidr, 0)) && !endswith(var.operator_cidr, "/0")
    error_message = "operator_cidr must be a valid CIDR narrower than /0 (for example 203.0.113.7/32)."
  }
}

variable "ami_id" {
  description = "Broker AMI; empty looks it up by the tags mqlab:broker and mqlab:flake-rev."
  type        = string
  default     = ""
}

variable "client_ami_id" {
  description = "AMI of the client nodes; empty uses the broker AMI (the images carry the mqlab worker too)."
  type        = string
  default     = ""
}

variable "flake_rev" {
  description = "Flake revision the looked-up AMI must carry (mqlab:flake-rev); empty takes the newest."
  type        = string
  default     = ""
}

variable "ebs_type" {
  description = "EBS volume type (gp2 reproduces the 2021 tests; gp3 default)."
  type        = string
  default     = "gp3"

  validation {
    condition     = contains(["gp2", "gp3", "io1", "io2", "st1"], var.ebs_type)
    error_message = "ebs_type must be one of gp2, gp3, io1, io2, st1."
  }
}

variable "ebs_size_gb" {
  description = "EBS volume size of each node in GiB."
  type        = number
  default     = 100

  validation {
    condition     = var.ebs_size_gb >= 8 && var.ebs_size_gb <= 16384
    error_message = "ebs_size_gb must be between 8 and 16384."
  }
}

variable "placement_group" {
  description = "Put all nodes into one cluster placement group."
  type        = bool
  default     = false
}

variable "expires_at" {
  description = "RFC 3339 UTC time after which `mqlab infra gc` destroys the lab (mqlab:expires-at tag)."
  type        = string

  validation {
    condition     = can(formatdate("YYYY", var.expires_at))
    error_message = "expires_at must be an RFC 3339 timestamp such as 2026-11-22T18:00:00Z."
  }
}

variable "ssh_user" {
  description = "Login user on the nodes, reported in the inventory."
  type        = string
  default     = "root"
}

variable "ssh_public_key" {
  description = "Public half of the lab's ed25519 key pair (OpenSSH format); the private half stays in the lab's state directory."
  type        = string

  validation {
    condition     = startswith(var.ssh_public_key, "ssh-ed25519 ")
    error_message = "ssh_public_key must be an OpenSSH ed25519 public key (ssh-ed25519 AAAA...)."
  }
}
