# `terraform test` (plan only: nothing is started). Run from terraform/modules/agent.

variables {
  name        = "digest"
  bridge_port = 4001
  image       = "iris-runtime:local"
  data_dir    = "/iris/data/agents/digest"
}

run "env_mode_with_the_shared_token_is_the_default" {
  command = plan

  assert {
    condition     = output.bridge_url == "http://127.0.0.1:4001"
    error_message = "bridge_url should point at the bridge port on the host network"
  }
  assert {
    condition     = local.identity["IRIS_API_PORT"] == "4101"
    error_message = "the API port should be bridge_port + 100"
  }
  assert {
    condition     = length(terraform_data.api_token) == 0
    error_message = "no own token unless unique_api_token"
  }
}

run "store_mode_with_its_own_token_passes_only_the_identity" {
  command = plan

  variables {
    secrets_mode     = "store"
    unique_api_token = true
    env_file         = "/iris/.env"
    broker_url       = "http://127.0.0.1:3000"
    extra_env = {
      IRIS_PROVIDER      = "offline"
      TELEGRAM_BOT_TOKEN = "must-not-pass"
      AGENT_NAME         = "someone-else"
    }
  }

  assert {
    condition     = !strcontains(local.run_command, "--env-file")
    error_message = "store mode must not hand the host env file to the container"
  }
  assert {
    condition     = local.plain_env["AGENT_NAME"] == "digest" && !contains(keys(local.plain_env), "TELEGRAM_BOT_TOKEN")
    error_message = "extra_env must not override the identity or the platform tokens"
  }
  assert {
    condition     = strcontains(local.run_command, "--env TELEGRAM_BOT_TOKEN") && strcontains(local.run_command, "--env IRIS_API_TOKEN")
    error_message = "platform tokens and the own token are passed by name"
  }
  assert {
    condition     = local.plain_env["IRIS_SECRET_BROKER_URL"] == "http://127.0.0.1:3000"
    error_message = "the broker URL reaches the container"
  }
}

run "an_unknown_secrets_mode_is_rejected" {
  command = plan

  variables {
    secrets_mode = "vault"
  }

  expect_failures = [var.secrets_mode]
}

run "store_mode_requires_unique_api_token" {
  command = plan

  variables {
    secrets_mode = "store"
  }

  expect_failures = [terraform_data.container]
}

run "proxy_mode_requires_unique_api_token" {
  command = plan

  variables {
    secrets_mode = "proxy"
  }

  expect_failures = [terraform_data.container]
}

run "every_registry_name_is_accepted" {
  command = plan

  variables {
    name = "9_lives-of-an-agent_with-a-name-as-long-as-the-registry-allows-"
  }

  assert {
    condition     = local.container == "iris-agent-9_lives-of-an-agent_with-a-name-as-long-as-the-registry-allows-"
    error_message = "the container is iris-agent-NAME"
  }
}

run "a_name_the_registry_refuses_is_rejected" {
  command = plan

  variables {
    name = "Has.Dots"
  }

  expect_failures = [var.name]
}
