locals {
  container = "iris-agent-${var.name}"
  api_port  = coalesce(var.api_port, var.bridge_port + 100)

  # Identity and secrets settings: set by this module only, whatever extra_env or the env file says.
  identity = merge(
    {
      AGENT_NAME        = var.name
      BRIDGE_PORT       = tostring(var.bridge_port)
      IRIS_API_PORT     = tostring(local.api_port)
      IRIS_API_HOST     = "127.0.0.1"
      IRIS_DATA_DIR     = var.container_data_dir
      IRIS_SECRETS_MODE = var.secrets_mode
    },
    var.broker_url != "" ? { IRIS_SECRET_BROKER_URL = var.broker_url } : {},
  )
  reserved = setunion(keys(local.identity), [
    "IRIS_SECRET_BROKER_URL", "IRIS_API_TOKEN",
    "IRIS_SLACK_APP_TOKEN", "IRIS_SLACK_BOT_TOKEN", "TELEGRAM_BOT_TOKEN",
  ])
  # IRIS_RUN_* name the values the docker command itself uses (see run_command).
  extra_env = {
    for k, v in var.extra_env : k => v if !contains(local.reserved, k) && !startswith(k, "IRIS_RUN_")
  }
  plain_env = merge(local.extra_env, local.identity)

  env_file = var.secrets_mode == "env" ? var.env_file : ""

  # Everything that shapes the container. A change replaces it; the token is represented by its
  # resource id (random, not the secret), the platform tokens by a hash.
  config = {
    container      = local.container
    image          = var.image
    image_revision = var.image_revision
    user           = var.user
    data_dir       = var.data_dir
    env_file       = local.env_file
    env            = local.plain_env
    token_id       = one(terraform_data.api_token[*].id)
    platform       = sha256(join("\n", [var.slack_app_token, var.slack_bot_token, var.telegram_bot_token]))
  }

  # `docker run` names every variable (-e NAME) and takes its value from the provisioner's
  # environment: no value, secret or not, is ever part of the command line that local-exec prints
  # and `ps` shows. -e comes after --env-file, so these win over the file.
  env_names = sort(concat(keys(local.plain_env), [
    "IRIS_SLACK_APP_TOKEN", "IRIS_SLACK_BOT_TOKEN", "TELEGRAM_BOT_TOKEN",
    ], var.unique_api_token ? ["IRIS_API_TOKEN"] : [],
  ))
  # A container that was created but failed to start is removed again: the resource is then
  # tainted, and Terraform runs no destroy provisioner for a tainted resource.
  run_command = join(" ", concat(
    [
      "docker rm --force \"$IRIS_RUN_CONTAINER\" >/dev/null 2>&1;",
      "docker run --detach --name \"$IRIS_RUN_CONTAINER\" --network host --restart unless-stopped",
      "--label iris.agent=\"$IRIS_RUN_AGENT\" --stop-timeout 20",
      "--log-opt max-size=10m --log-opt max-file=3",
      "--volume \"$IRIS_RUN_HOST_DATA_DIR:$IRIS_RUN_CONTAINER_DATA_DIR\"",
    ],
    var.user != "" ? ["--user \"$IRIS_RUN_USER\""] : [],
    local.env_file != "" ? ["--env-file \"$IRIS_RUN_ENV_FILE\""] : [],
    [for name in local.env_names : "--env ${name}"],
    [
      "\"$IRIS_RUN_IMAGE\"",
      "|| { rc=$?; docker rm --force \"$IRIS_RUN_CONTAINER\" >/dev/null 2>&1; exit $rc; }",
    ],
  ))
}

# The agent's own API token: random once (uuid() is evaluated only when this is created; later
# plans ignore the new value), stable afterwards. Two uuids give 244 random bits.
resource "terraform_data" "api_token" {
  count = var.unique_api_token ? 1 : 0
  input = replace("${uuid()}${uuid()}", "-", "")
  lifecycle {
    ignore_changes = [input]
  }
}

resource "terraform_data" "container" {
  triggers_replace = sha256(jsonencode(local.config))

  # Only what the destroy-time provisioner may use (it can reference nothing but self).
  input = {
    container = local.container
  }

  lifecycle {
    precondition {
      condition     = var.secrets_mode == "env" || var.unique_api_token
      error_message = "secrets_mode \"${var.secrets_mode}\" requires unique_api_token = true: the parent's broker scopes an agent's secrets by the agent's own token."
    }
  }

  provisioner "local-exec" {
    command = local.run_command
    environment = merge(
      local.plain_env,
      {
        IRIS_RUN_CONTAINER          = local.container
        IRIS_RUN_AGENT              = var.name
        IRIS_RUN_IMAGE              = var.image
        IRIS_RUN_USER               = var.user
        IRIS_RUN_ENV_FILE           = local.env_file
        IRIS_RUN_HOST_DATA_DIR      = var.data_dir
        IRIS_RUN_CONTAINER_DATA_DIR = var.container_data_dir
        IRIS_SLACK_APP_TOKEN        = var.slack_app_token
        IRIS_SLACK_BOT_TOKEN        = var.slack_bot_token
        TELEGRAM_BOT_TOKEN          = var.telegram_bot_token
      },
      var.unique_api_token ? { IRIS_API_TOKEN = sensitive(terraform_data.api_token[0].output) } : {},
    )
  }

  provisioner "local-exec" {
    when = destroy
    # A container that is already gone is fine; an unreachable daemon is an error.
    command = "out=$(docker rm --force \"$IRIS_RUN_CONTAINER\" 2>&1) || case \"$out\" in *'No such container'*) ;; *) echo \"$out\" >&2; exit 1 ;; esac"
    environment = {
      IRIS_RUN_CONTAINER = self.input.container
    }
  }
}
