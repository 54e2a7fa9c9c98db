variable "lab_id" {
  description = "Identifier of the lab; prefixes resource names and is written to the mqlab:lab tag."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$", var.lab_id))
    error_message = "lab_id must be 2-40 characters of lowercase letters, digits and dashes."
  }
}

variable "broker" {
  description = "Broker under test (e.g. nats); written to the mqlab:broker tag and the user data."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9_-]{0,31}$", var.broker))
    error_message = "broker must be a lowercase name such as nats, rabbitmq or postgres."
  }
}

variable "sender_count" {
  description = "Number of sender (producer) nodes."
  type        = number
  default     = 1

  validation {
    condition     = var.sender_count >= 0 && var.sender_count <= 64 && floor(var.sender_count) == var.sender_count
    error_message = "sender_count must be a whole number from 0 to 64."
  }
}

variable "receiver_count" {
  description = "Number of receiver (consumer) nodes."
  type        = number
  default     = 1

  validation {
    condition     = var.receiver_count >= 0 && var.receiver_count <= 64 && floor(var.receiver_count) == var.receiver_count
    error_message = "receiver_count must be a whole number from 0 to 64."
  }
}

variable "instance_type" {
  description = "EC2 instance type of the sender and receiver nodes."
  type        = string
  default     = "r5.2xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like FAMILY.SIZE, for example r5.2xlarge."
  }
}

variable "ami_id" {
  description = "AMI the client nodes boot (mqlab's worker image)."
  type        = string

  validation {
    condition     = can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must be an AMI ID like ami-0123456789abcdef0."
  }
}

variable "broker_ips" {
  description = "Private IPs of the broker nodes, passed to each client in its user data."
  type        = list(string)
}

variable "subnet_ids" {
  description = "Subnets to place nodes in, round robin (client i of each role goes to subnet i mod count)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "At least one subnet is needed."
  }
}

variable "security_group_ids" {
  description = "Security groups each node joins."
  type        = list(string)
}

variable "key_name" {
  description = "Name of the EC2 key pair installed for SSH."
  type        = string
}

variable "ebs_type" {
  description = "EBS volume type of each node's data volume (gp2 reproduces the 2021 tests; gp3 is the default)."
  type        = string
  default     = "gp3"

  validation {
    condition     = contains(["gp2", "gp3", "io1", "io2", "st1"], var.ebs_type)
    error_message = "ebs_type must be one of gp2, gp3, io1, io2, st1."
  }
}

variable "ebs_size_gb" {
  description = "Size of each node's root/data EBS volume in GiB."
  type        = number
  default     = 50

  validation {
    condition     = var.ebs_size_gb >= 8 && var.ebs_size_gb <= 16384
    error_message = "ebs_size_gb must be between 8 and 16384."
  }
}

variable "placement_group" {
  description = "Placement group name, or null for none."
  type        = string
  default     = null
}

variable "expires_at" {
  description = "RFC 3339 UTC time after which `mqlab infra gc` destroys the lab; written to the mqlab:expires-at tag."
  type        = string

  validation {
    condition     = can(formatdate("YYYY", var.expires_at))
    error_message = "expires_at must be an RFC 3339 timestamp such as 2026-11-22T18:00:00Z."
  }
}

variable "tags" {
  description = "Tags added to every resource (project, lab id, broker, expiry)."
  type        = map(string)
  default     = {}
}
