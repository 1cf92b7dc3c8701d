"""playbooks/site.yml converged on a bare Debian bookworm server (systemd as PID 1 in an nspawn
container, reached with the nsenter connection, changes kept on an overlay across reboots).

One converge for the package (conftest.py); its modules then look at the result in their names'
order (pytest collects a folder sorted by name), each building on what the ones before did:
``test_1_services``: OpenBao initialised, unsealed and serving, iris.service healthy;
``test_2_agents``: a declared sub-agent running, registered, answering through the bridge, reading
the secret its skill declares through the broker and refused another, an agent spawned from chat;
``test_3_day_two``: a second run and a check-mode run change nothing, ``state: absent`` removes the
agent, a reboot brings OpenBao back unsealed (auto_unseal, as the test inventory sets it) and Iris
healthy; ``test_4_leak_scan``, last: no planted secret anywhere the others left things.

Everything the roles install comes from the session wheelhouse (no package index) and the
controller's checkout; the LLM is the ``scripted`` provider. Ports are picked free on loopback:
the container shares the host's network.
"""
