"""`load_campaign`: a campaign file read and checked against everything perflib knows.

`perflib.config.read_campaign` checks what the file alone decides (every key against its
declaration, with line numbers); on top of it this checks what needs the rest of perflib: that each
candidate names a registered measurement. Commands and notebooks load campaigns through here.
"""

from __future__ import annotations

from pathlib import Path

from perflib.config import Campaign, read_campaign
from perflib.verdicts import check_campaign


def load_campaign(path: str | Path) -> Campaign:
    """Read and validate a campaign YAML file; errors name the key path, line and expectation."""
    campaign = read_campaign(path)
    check_campaign(campaign)
    return campaign
