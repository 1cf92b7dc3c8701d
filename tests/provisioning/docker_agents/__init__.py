"""Docker-mode agents end to end against a real dockerd and the real terraform binary.

`DockerAgents.install` writes the agent's block into `terraform/agents.tf` (in a copy of the
checkout), applies: the root's shared resource builds the runtime image from the Dockerfile on a
base imported from the debootstrap tree, the module starts the container; the agent then answers
`/health` on its API port and the bridge's job endpoint on its bridge port. A second apply changes
nothing, `remove` takes the container away. A spawn after the image's sources changed builds the
new image for the new agent only: the others keep their containers until a full apply. `preflight`
refuses what install would refuse, before anything is written. Secrets: the platform tokens reach
the container set empty whatever the env file says, a store-mode container gets no env file at
all, and no token shows in Terraform's output or in any process's argv.

The package's modules run in their names' order (pytest collects a folder sorted by name): the
store-mode agent they share (conftest.py) is installed by ``test_1_store_agent``'s first test,
whose install must be the one that builds the image.
"""
