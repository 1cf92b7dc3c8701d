variable "enable_docker_agents" {
  description = "Build the shared runtime image. Off by default so hosts that never run a Docker agent never pay for the build."
  type        = bool
  default     = false
}

variable "image" {
  description = "Tag of the runtime image every agent container runs."
  type        = string
  default     = "iris-runtime:local"
}

variable "base_image" {
  description = "Base of the runtime image (BASE_IMAGE build argument): any image with python3 and its venv module."
  type        = string
  default     = "python:3.11-slim"
}

variable "repo_dir" {
  description = "The Iris checkout used as the build context (holds the Dockerfile). Empty: the folder above this one."
  type        = string
  default     = ""
}

variable "env_file" {
  description = "Host env file handed to agents whose secrets_mode is \"env\" (--env-file). Empty: none."
  type        = string
  default     = ""
}

variable "broker_url" {
  description = "The parent's API, where store/proxy-mode agents resolve their secrets (IRIS_SECRET_BROKER_URL)."
  type        = string
  default     = ""
}
