"""The model config option ``iris acp`` offers an editor (category ``model``): the models table.

Iris answers with one model per process (``IRIS_MODEL``, else the provider's default), so the
option lists every model of the configured provider with that one current. Choosing the current
model is accepted; choosing another is refused with how to get it, never accepted and ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from acp import RequestError
from acp.schema import (
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SetSessionConfigOptionResponse,
)

from iris_runtime.config import Settings
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)

OPTION_ID = "model"


class ModelOption:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._current, self._models = self._read()

    def _read(self) -> tuple[str, list[str]]:
        from iris_runtime.providers.models import load_models

        provider = self._settings.provider
        try:
            table = load_models(self._settings)
        except IrisError as exc:  # an unreadable models.yaml: offer what is configured only
            log.error("the models table is unreadable: %s", exc.message)
            return self._settings.model, [self._settings.model] if self._settings.model else []
        current = self._settings.model or table.default_for(provider) or ""
        models = sorted(m.id for m in table.models.values() if m.provider == provider)
        if current and current not in models:
            models.insert(0, current)
        return current, models

    def options(self) -> list[Any] | None:
        if not self._current:
            return None
        choices = [SessionConfigSelectOption(value=m, name=m) for m in self._models]
        option = SessionConfigOptionSelect(
            id=OPTION_ID,
            name="Model",
            category="model",
            type="select",
            current_value=self._current,
            options=choices,
            description=f"The models of Iris's provider ({self._settings.provider})",
        )
        return [option]

    def choose(self, config_id: str, value: Any) -> SetSessionConfigOptionResponse:
        if config_id != OPTION_ID:
            raise RequestError.invalid_params({"configId": f"no option {str(config_id)[:64]!r}"})
        if value != self._current:
            raise RequestError.invalid_params(
                {
                    "value": f"this Iris answers with {self._current}; to use {str(value)[:64]}, "
                    f"start `iris acp` with IRIS_MODEL={str(value)[:64]}"
                }
            )
        return SetSessionConfigOptionResponse(config_options=self.options() or [])
