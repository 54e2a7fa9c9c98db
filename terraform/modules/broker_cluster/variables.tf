variable "lab_id" {
  description = "Identifier of the lab; prefixes resource names and is written to the mqlab:lab tag."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$", var.lab_id))
    error_message = "lab_id must be 2-40 characters of lowercase letters, digits and dashes."
  }
}

variable "broker" {
  description = "Broker name as in mqlab's registry (e.g. nats); selects the AMI by its mqlab:broker tag."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9_-]{0,31}$", var.broker))
    error_message = "broker must be a lowercase name such as nats, rabbitmq or postgres."
  }
}

variable "node_count" {
  description = "Number of identical broker nodes."
  type        = number
  default     = 3

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 15 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 15."
  }
}

variable "instance_type" {
  description = "EC2 instance type of the broker nodes (r5.2xlarge: 8 vCPU, 64 GiB, as in the published tests)."
  type        = string
  default     = "r5.2xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like FAMILY.SIZE, for example r5.2xlarge."
  }
}

variable "ami_id" {
  description = "AMI to boot. When empty, the newest AMI tagged mqlab:broker = broker (and mqlab:flake-rev = flake_rev if set) is used."
  type        = string
  default     = ""

  validation {
    condition     = var.ami_id == "" || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must be empty or an AMI ID like ami-0123456789abcdef0."
  }
}

variable "flake_rev" {
  description = "Flake revision the AMI must be tagged with (mqlab:flake-rev); empty takes the newest image for the broker."
  type        = string
  default     = ""
}

variable "ami_owners" {
  description = "Owners searched for tagged AMIs (self: images published from this account)."
  type        = list(string)
  default     = ["self"]
}

variable "subnet_ids" {
  description = "Subnets to place nodes in, round robin (node i goes to subnet i mod count)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "At least one subnet is needed."
  }
}

variable "subnet_cidrs" {
  description = "CIDR blocks of subnet_ids (same order); node i gets the fixed address cidrhost(cidr, 10 + i) so peers are known at boot."
  type        = list(string)

  validation {
    condition     = alltrue([for c in var.subnet_cidrs : can(cidrhost(c, 0))])
    error_message = "subnet_cidrs must be CIDR blocks."
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
  default     = 100

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
