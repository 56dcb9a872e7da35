"""The operator's own settings, from its environment (the Helm chart sets them)."""

from __future__ import annotations

import os

from . import constants


def default_server_image() -> str:
    """The image of InferenceServices that set no spec.image."""
    return os.environ.get(constants.SERVER_IMAGE_ENV) or constants.DEFAULT_SERVER_IMAGE


def resync_seconds() -> float:
    """How often every InferenceService is reconciled even when nothing announced a change."""
    return float(os.environ.get(constants.RESYNC_SECONDS_ENV) or constants.DEFAULT_RESYNC_SECONDS)


def endpoint_picker_image() -> str:
    """The image of the router's endpoint picker (chart value endpointPicker.image)."""
    return os.environ.get(constants.EPP_IMAGE_ENV) or constants.DEFAULT_EPP_IMAGE
