data "aws_availability_zones" "available" {
  count = length(var.availability_zone_names) == 0 ? 1 : 0
  state = "available"
}

locals {
  zone_names = length(var.availability_zone_names) > 0 ? var.availability_zone_names : data.aws_availability_zones.available[0].names
  zones      = slice(local.zone_names, 0, var.availability_zones)
  tags       = merge({ Project = "mqlab" }, var.tags, { "mqlab:lab" = var.lab_id, "mqlab:role" = "network" })
}

# The lab addresses its hosts by IP only (inventory, peers, SSH), so the VPC keeps AWS's
# DNS defaults (resolution on, public DNS hostnames off): turning hostnames on after the
# VPC's creation makes the AWS provider wait 10 s for the attribute to propagate.
resource "aws_vpc" "lab" {
  cidr_block = var.vpc_cidr
  tags       = merge(local.tags, { Name = "${var.lab_id}-vpc" })
}

resource "aws_internet_gateway" "lab" {
  vpc_id = aws_vpc.lab.id
  tags   = merge(local.tags, { Name = "${var.lab_id}-igw" })
}

resource "aws_subnet" "lab" {
  count                   = var.availability_zones
  vpc_id                  = aws_vpc.lab.id
  availability_zone       = local.zones[count.index]
  cidr_block              = cidrsubnet(var.vpc_cidr, 4, count.index)
  map_public_ip_on_launch = true
  tags                    = merge(local.tags, { Name = "${var.lab_id}-subnet-${count.index}" })
}

resource "aws_route_table" "lab" {
  vpc_id = aws_vpc.lab.id
  tags   = merge(local.tags, { Name = "${var.lab_id}-rt" })
}

resource "aws_route" "internet" {
  route_table_id         = aws_route_table.lab.id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.lab.id
}

resource "aws_route_table_association" "lab" {
  count          = var.availability_zones
  subnet_id      = aws_subnet.lab[count.index].id
  route_table_id = aws_route_table.lab.id
}

resource "aws_security_group" "ssh" {
  name        = "${var.lab_id}-ssh"
  description = "SSH from the operator only"
  vpc_id      = aws_vpc.lab.id
  tags        = merge(local.tags, { Name = "${var.lab_id}-ssh" })

  ingress {
    description = "SSH from the operator"
    from_port   = 22
    to_port     = 22
    protocol    = "tcp"
    cidr_blocks = [var.operator_cidr]
  }

  egress {
    description = "Outbound (package caches, NTP)"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = ["0.0.0.0/0"]
  }
}

resource "aws_security_group" "internal" {
  name        = "${var.lab_id}-internal"
  description = "Broker and client ports, inside the VPC only"
  vpc_id      = aws_vpc.lab.id
  tags        = merge(local.tags, { Name = "${var.lab_id}-internal" })

  dynamic "ingress" {
    for_each = var.internal_port_ranges
    content {
      description = "Broker and client traffic inside the VPC"
      from_port   = ingress.value.from
      to_port     = ingress.value.to
      protocol    = "tcp"
      cidr_blocks = [var.vpc_cidr]
    }
  }

  ingress {
    description = "ICMP inside the VPC"
    from_port   = -1
    to_port     = -1
    protocol    = "icmp"
    cidr_blocks = [var.vpc_cidr]
  }
}

resource "aws_placement_group" "lab" {
  count    = var.placement_group ? 1 : 0
  name     = "${var.lab_id}-cluster"
  strategy = "cluster"
  tags     = merge(local.tags, { Name = "${var.lab_id}-cluster" })
}
