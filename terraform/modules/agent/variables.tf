variable "name" {
  description = "Agent name (the registry's rule): the container is iris-agent-NAME, AGENT_NAME inside."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{0,62}$", var.name))
    error_message = "name must be lowercase letters, digits, dashes and underscores, starting with a letter or digit (at most 63 characters)."
  }
}

variable "bridge_port" {
  description = "Bridge port (POST /bridge). The container shares the host network."
  type        = number
  validation {
    condition     = var.bridge_port >= 1 && var.bridge_port <= 65435 && floor(var.bridge_port) == var.bridge_port
    error_message = "bridge_port must be a whole number from 1 to 65435 (the API port is bridge_port + 100)."
  }
}

variable "api_port" {
  description = "Internal API port, where /health lives. Null: bridge_port + 100."
  type        = number
  default     = null
}

variable "bridge_host" {
  description = "Host part of the bridge_url output (the container uses the host's network)."
  type        = string
  default     = "127.0.0.1"
}

variable "image" {
  description = "Runtime image to run (built by the root's terraform_data.iris_runtime_image)."
  type        = string
}

variable "image_revision" {
  description = "Revision of the image's sources; a new value replaces the container so it runs the rebuilt image."
  type        = string
  default     = null
}

variable "data_dir" {
  description = "Absolute host path of the agent's home, bind-mounted as the container's IRIS_DATA_DIR."
  type        = string
  validation {
    condition     = startswith(var.data_dir, "/")
    error_message = "data_dir must be an absolute path."
  }
}

variable "container_data_dir" {
  description = "Where the agent's home appears inside the container (its IRIS_DATA_DIR)."
  type        = string
  default     = "/iris/data"
}

variable "user" {
  description = "uid:gid the container runs as (the owner of data_dir, so files it writes stay the agent's). Empty: the image's default."
  type        = string
  default     = ""
}

variable "secrets_mode" {
  description = "env: the container gets the host env file; store/proxy: only its identity and the broker URL, every secret through the parent's broker."
  type        = string
  default     = "env"
  validation {
    condition     = contains(["env", "store", "proxy"], var.secrets_mode)
    error_message = "secrets_mode must be one of env, store, proxy."
  }
}

variable "unique_api_token" {
  description = "Give the agent its own IRIS_API_TOKEN (the api_token output). Required by store/proxy: the broker tells agents apart by their tokens."
  type        = bool
  default     = false
}

variable "env_file" {
  description = "Host env file passed with --env-file in env mode (ignored in store/proxy). Empty: none."
  type        = string
  default     = ""
}

variable "broker_url" {
  description = "IRIS_SECRET_BROKER_URL: the parent's API. Empty: not set."
  type        = string
  default     = ""
}

# The parent's own chat tokens must never reach a bridge-only agent: these three are always passed
# as explicit -e overrides, which Docker applies after --env-file. Set them only to a separate
# bot's credentials when the agent should talk to Slack/Telegram itself.
variable "slack_app_token" {
  type      = string
  default   = ""
  sensitive = true
}

variable "slack_bot_token" {
  type      = string
  default   = ""
  sensitive = true
}

variable "telegram_bot_token" {
  type      = string
  default   = ""
  sensitive = true
}

variable "extra_env" {
  description = "More literal, non-secret environment (IRIS_PROVIDER, IRIS_MODEL...). Cannot override the identity, ports, secrets settings or tokens."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for k in keys(var.extra_env) : can(regex("^[A-Za-z_][A-Za-z0-9_]*$", k))])
    error_message = "extra_env keys must be environment variable names ([A-Za-z_][A-Za-z0-9_]*)."
  }
}
