"""Iris on Slack: a transport plugin over Socket Mode, built on the official ``slack_sdk``.

It registers only when both ``IRIS_SLACK_APP_TOKEN`` and ``IRIS_SLACK_BOT_TOKEN`` are set (see
:mod:`iris_slack.plugin`); without them it connects nowhere and logs nothing.
"""

__version__ = "0.1.0"
