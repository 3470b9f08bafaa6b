"""`perflib.open_campaign` finds a campaign file named relative to the project from any folder of it
(JupyterLab runs a notebook's kernel in the notebook's folder), and says where it looked when it cannot."""

from __future__ import annotations

import shutil

import pytest
from support import REPO

from perflib import open_campaign
from perflib.errors import InputError
from perflib.explore import find_campaign_file, project_root

CAMPAIGN = "campaigns/cpu-reference.yaml"


def test_a_project_relative_path_opens_from_notebooks_and_from_the_root(monkeypatch):
    monkeypatch.chdir(REPO / "notebooks")
    from_notebooks = open_campaign(CAMPAIGN)
    monkeypatch.chdir(REPO)
    from_root = open_campaign(CAMPAIGN)
    assert from_notebooks.campaign.path.resolve() == from_root.campaign.path.resolve() == (REPO / CAMPAIGN).resolve()
    assert from_notebooks.campaign.data_dir.resolve() == from_root.campaign.data_dir.resolve()


def test_the_working_folder_comes_before_the_project_root(tmp_path):
    project = tmp_path / "project"
    (project / "campaigns").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    (project / "notebooks" / "campaigns").mkdir(parents=True)
    for place in (project, project / "notebooks"):
        shutil.copy(REPO / CAMPAIGN, place / CAMPAIGN)
    assert project_root(project / "notebooks" / "campaigns") == project / "notebooks"
    assert find_campaign_file(CAMPAIGN, cwd=project / "notebooks") == project / "notebooks" / CAMPAIGN
    shutil.rmtree(project / "notebooks" / "campaigns")
    assert find_campaign_file(CAMPAIGN, cwd=project / "notebooks") == project / CAMPAIGN


def test_a_missing_file_names_every_place_it_looked(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    with pytest.raises(InputError) as err:
        open_campaign("campaigns/nope.yaml")
    text = str(err.value)
    assert str(tmp_path / "notebooks" / "campaigns" / "nope.yaml") in text
    assert str(tmp_path / "campaigns" / "nope.yaml") in text


def test_outside_any_project_it_says_there_is_none(tmp_path, monkeypatch):
    if project_root(tmp_path) is not None:
        pytest.skip(f"{tmp_path} lies inside a folder with campaigns/ or pyproject.toml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no folder holding campaigns/ or pyproject.toml"):
        open_campaign("campaigns/cpu-reference.yaml")
