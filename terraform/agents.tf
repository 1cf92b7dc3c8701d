# Docker-mode sub-agents. `iris agents spawn NAME --mode docker` writes one block per agent here,
# between the marker comments `# >>> iris-agent NAME` and `# <<< iris-agent NAME`, and
# `iris agents remove NAME` deletes it again; keep hand edits outside the markers. Each block is
#
#   module "agent_NAME" {
#     source = "./modules/agent"
#     ...                          name, ports, secrets mode, agent home, extra_env
#     depends_on = [terraform_data.iris_runtime_image]
#   }
#
#   output "agent_NAME" {         { bridge_url, api_token }, registered in agents.json by spawn
#     value     = { ... }
#     sensitive = true
#   }
