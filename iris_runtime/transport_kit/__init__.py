"""Building blocks for transport plugins (Slack, Telegram and third-party ones).

Platform-neutral helpers that more than one transport needs, kept out of ``engine/`` because the
engine never talks to a platform itself: :mod:`.edit_pacing` (one message edit per interval per
conversation) and :mod:`.ordered_queues` (work in order per conversation, conversations in
parallel).
"""
