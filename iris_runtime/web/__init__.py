"""The web layer: Flask apps per port, the API blueprints and the gunicorn app factory.

Only this package imports Flask.
"""

from iris_runtime.web.app import create_app

__all__ = ["create_app"]
