"""The secret broker: who may read which secret, from which store, with an audit trail.

``GET /secrets/<name>`` answers a caller identified only by the token it presented. Values come
from a backend (``file``: encrypted on this host; ``vault``: Vault/OpenBao through hvac) chosen
by ``IRIS_SECRET_BACKEND``, or, in the legacy ``env`` mode, from the environment.
"""
