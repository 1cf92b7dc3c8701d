"""A wire-level fake of Slack: the Web API methods a bot uses and the Socket Mode WebSocket.

It is a real HTTP and WebSocket server on a free 127.0.0.1 port, so a test points the *real*
``slack_sdk`` at it (``WebClient(base_url=fake.api_url)``; ``apps.connections.open`` hands out the
fake's own ``ws://`` Socket Mode URL) and asserts on the API calls it actually received::

    from iris_runtime.testing.fake_slack import FakeSlack, RateLimited

    with FakeSlack() as fake:
        fake.inject("chat.postMessage", RateLimited(retry_after=1))
        ...  # start the client with fake.api_url, fake.bot_token, fake.app_token
        fake.wait_connected()
        ts = fake.mention("CGENERAL1", "hello")
        fake.wait_for(lambda f: f.thread("CGENERAL1", ts), "a reply in the thread")

Text limits are checked on the text as sent (Slack counts the escaped text); ``max_text_length``
lowers the limit to provoke ``msg_too_long``. Only the standard library is used.
"""

from iris_runtime.testing.fake_slack.server import FAKE_APP_TOKEN, FAKE_BOT_TOKEN, FakeSlack
from iris_runtime.testing.fake_slack.workspace import (
    ApiCall,
    ApiError,
    ApplyThenDrop,
    Conversation,
    DropConnection,
    Edit,
    Fault,
    HttpFailure,
    Message,
    RateLimited,
    StoredFile,
    User,
)

__all__ = [
    "FAKE_APP_TOKEN",
    "FAKE_BOT_TOKEN",
    "ApiCall",
    "ApiError",
    "ApplyThenDrop",
    "Conversation",
    "DropConnection",
    "Edit",
    "FakeSlack",
    "Fault",
    "HttpFailure",
    "Message",
    "RateLimited",
    "StoredFile",
    "User",
]
