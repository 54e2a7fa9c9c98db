variable "lab_id" {
  description = "Identifier of the lab; prefixes resource names and is written to the mqlab:lab tag."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$", var.lab_id))
    error_message = "lab_id must be 2-40 characters of lowercase letters, digits and dashes."
  }
}

variable "vpc_cidr" {
  description = "IPv4 CIDR block of the lab's VPC (a /16 to /20; each availability zone gets one subnet of it)."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) >= 16 && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be an IPv4 CIDR block between /16 and /20."
  }
}

variable "availability_zones" {
  description = "Number of availability zones (one subnet each). 1 reproduces the published tests; more spreads the nodes."
  type        = number
  default     = 1

  validation {
    condition     = var.availability_zones >= 1 && var.availability_zones <= 6 && floor(var.availability_zones) == var.availability_zones
    error_message = "availability_zones must be a whole number from 1 to 6."
  }
}

variable "availability_zone_names" {
  description = "Explicit availability zone names to use (optional); when empty, the region's first available zones are taken."
  type        = list(string)
  default     = []
}

variable "operator_cidr" {
  description = "CIDR allowed to reach the nodes over SSH (the operator's address, e.g. 203.0.113.7/32). Required; never open to the world."
  type        = string

  validation {
    condition     = can(cidrhost(var.operator_cidr, 0)) && !endswith(var.operator_cidr, "/0")
    error_message = "operator_cidr must be a valid IPv4 CIDR narrower than /0 (for example 203.0.113.7/32); 0.0.0.0/0 is refused."
  }
}

variable "internal_port_ranges" {
  description = "TCP port ranges (broker, client, metrics) open between nodes inside the VPC only."
  type = list(object({
    from = number
    to   = number
  }))
  default = [{ from = 1024, to = 65535 }]

  validation {
    condition     = alltrue([for r in var.internal_port_ranges : r.from >= 1 && r.to <= 65535 && r.from <= r.to])
    error_message = "Each internal port range needs 1 <= from <= to <= 65535."
  }
}

variable "placement_group" {
  description = "Create a cluster placement group for the nodes (lower, steadier latency inside one availability zone)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource (project, lab id, broker, expiry)."
  type        = map(string)
  default     = {}
}
