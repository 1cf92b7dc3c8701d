output "api_token" {
  description = "The agent's own API token (null unless unique_api_token): register it in agents.json."
  value       = var.unique_api_token ? terraform_data.api_token[0].output : null
  sensitive   = true
}

output "bridge_url" {
  description = "Where the parent reaches the agent's bridge."
  value       = "http://${var.bridge_host}:${var.bridge_port}"
}

output "container" {
  description = "Name of the agent's container."
  value       = terraform_data.container.output.container
}
