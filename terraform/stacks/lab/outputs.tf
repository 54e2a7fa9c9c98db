output "inventory" {
  description = "Everything mqlab needs to reach the lab; read by mqlab.labs.aws.inventory (format_version 1)."
  value = {
    format_version = 1
    lab_id         = var.lab_id
    region         = var.region
    ssh_user       = var.ssh_user
    broker         = var.broker
    expires_at     = var.expires_at
    brokers        = module.brokers.nodes
    senders        = module.clients.senders
    receivers      = module.clients.receivers
  }
}
