"""Service mode under a real systemd (PID 1 in a booted nspawn container, one boot for the
package: conftest.py): the real `iris serve` sub-agent installed as a unit runs as the
unprivileged agent user without capabilities, answers /health and the bridge, is restarted by
systemd after `kill -9`, and is removed without a trace (the shared agent user stays); a command
that dies at once fails install with its journal (``test_unit_lifecycle``); hostile values reach
the process exactly as given; the agent sees nothing of Iris's data dir or its siblings but its
own home, even after Iris replaces agents.json atomically (``test_unit_sandbox``)."""
