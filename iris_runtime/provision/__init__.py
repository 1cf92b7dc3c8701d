"""Running sub-agents on a host: systemd units, the process supervisor, Docker through Terraform.

Shared by ``iris agents spawn``/``remove`` and the Ansible roles. Each way of running an agent is
an :class:`~iris_runtime.provision.launch.AgentService`; :mod:`iris_runtime.agents.spawn` decides
which one and undoes everything when a step fails.
"""
