"""Private by default: who sees and opens which model, publishing by the instructor, opaque keys, and a
checkpoints folder with broken files that never breaks the list."""
import hmac
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from harness.model_files import exported
from service import catalog, uploads
from service.settings import Settings
from transformer_core.errors import ModelSourceError

ROOT = Path(__file__).resolve().parents[2]
ALICE, BOB = catalog.new_token(), catalog.new_token()
ADMIN = "instructor-secret-0123456789"


def users(viewer=None) -> list[str]:
    return [e.label for e in catalog.entries(viewer) if e.kind == "user"]


@pytest.fixture
def alices_model(tmp_path, user_dir) -> str:
    return uploads.import_model(exported(tmp_path), "m.safetensors", "alice's model", owner=ALICE)


def test_tokens_are_random_and_cards_hold_only_their_hash(alices_model, user_dir):
    assert len(ALICE) >= 32 and ALICE != BOB
    card_text = (user_dir / alices_model.split(":")[1] / "card.json").read_text(encoding="utf-8")
    assert ALICE not in card_text and json.loads(card_text)["owner"] == catalog.owner_id(ALICE)
    assert catalog.owner_id(ALICE) != catalog.owner_id(BOB) and catalog.owner_id("") is None


def test_a_model_is_seen_and_opened_by_its_owner_only(alices_model):
    assert users(ALICE) == ["alice's model"] and users(BOB) == [] and users(None) == []
    mine = catalog.entry(alices_model, ALICE)
    assert mine.card["mine"] and mine.card["private"] and "owner" not in mine.card
    assert catalog.entry(alices_model, BOB) is None
    model, card = catalog.load(alices_model, "cpu", viewer=ALICE)
    assert "owner" not in card and model.cfg.d_model == 16


def test_anothers_private_model_is_refused_exactly_like_a_missing_one(alices_model):
    with pytest.raises(ModelSourceError) as theirs:
        catalog.load(alices_model, "cpu", viewer=BOB)
    with pytest.raises(ModelSourceError) as missing:
        catalog.load("user:m-0000000000000000", "cpu", viewer=BOB)
    with pytest.raises(ModelSourceError) as nobody:
        catalog.load(alices_model, "cpu")
    assert theirs.value.code == missing.value.code == nobody.value.code == "model_unknown"
    assert str(theirs.value) == str(missing.value)


@pytest.mark.parametrize("key", ["user:../../etc/passwd", "user:/etc/passwd", "user:", "user:.jobs",
                                 "user:m-1/../../x", "shipped:../checkpoints", "gpt2:file:../../etc/passwd"])
def test_keys_are_opaque_ids_never_paths(key, user_dir):
    with pytest.raises(ModelSourceError):
        catalog.load(key, "cpu", viewer=ALICE)


def test_saved_keys_are_random_folder_ids(alices_model):
    assert catalog.entries(ALICE)[0].key  # shipped first
    assert [e.key for e in catalog.entries(ALICE) if e.kind == "user"] == [alices_model]
    assert alices_model.startswith("user:m-") and len(alices_model) == len("user:m-") + 16
    assert "alice" not in alices_model


def test_everyone_sees_shipped_presets_and_gpt2(alices_model):
    kinds = {e.kind for e in catalog.entries(BOB)}
    assert {"shipped", "preset", "gpt2"} <= kinds and catalog.default_key().startswith("shipped:")


def test_publishing_needs_the_admin_token_compared_in_constant_time(alices_model, server_env, monkeypatch):
    from service.catalog import PublishError

    with pytest.raises(PublishError) as off:
        catalog.publish(alices_model, ADMIN)
    assert off.value.code == "publish_off" and "TRANSFORMER_EXPLORER_ADMIN_TOKEN" in str(off.value)
    server_env(TRANSFORMER_EXPLORER_ADMIN_TOKEN=ADMIN)
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(catalog.hmac, "compare_digest", lambda a, b: (compared.append(1), real(a, b))[1])
    for wrong in ("", "instructor", ADMIN[:-1] + "X", None):
        with pytest.raises(PublishError) as denied:
            catalog.publish(alices_model, wrong)
        assert denied.value.code == "publish_denied"
    assert compared and users(BOB) == []
    assert not catalog.is_admin(ALICE) and catalog.is_admin(ADMIN)
    catalog.publish(alices_model, ADMIN)
    assert users(BOB) == ["alice's model"] and users(None) == ["alice's model"]
    shown = catalog.entry(alices_model, BOB)
    assert not shown.card["mine"] and not shown.card["private"]
    catalog.load(alices_model, "cpu", viewer=BOB)
    catalog.publish(alices_model, ADMIN, published=False)  # private again
    assert users(BOB) == [] and users(ALICE) == ["alice's model"]
    with pytest.raises(ModelSourceError):
        catalog.publish("user:m-0000000000000000", ADMIN)


def test_the_admin_token_is_a_secret_setting():
    short = Settings.from_env({"TRANSFORMER_EXPLORER_ADMIN_TOKEN": "abc"})
    assert short.admin_token == ""  # too short to be safe: publishing stays off
    good = Settings.from_env({"TRANSFORMER_EXPLORER_ADMIN_TOKEN": ADMIN})
    assert good.admin_token == ADMIN and ADMIN not in repr(good)


def test_a_folder_copied_in_by_hand_has_no_owner_and_is_public(user_dir):
    shutil.copytree(ROOT / "assets" / "models" / "copy", user_dir / "instructor-copy")
    assert "copy" in users(None) and "copy" in users(BOB)


def test_broken_files_in_the_checkpoints_folder_are_skipped_and_reported_once(alices_model, user_dir, caplog):
    good = ROOT / "assets" / "models" / "copy"

    def folder(name: str, **files) -> None:
        shutil.copytree(good, user_dir / name)
        for fname, data in files.items():
            path = user_dir / name / fname.replace("_", ".")
            if data is None:
                path.unlink()
            else:
                path.write_bytes(data if isinstance(data, bytes) else data.encode())

    folder("malformed", card_json="{not json")
    folder("binary-config", config_json=os.urandom(512))
    folder("no-weights", model_safetensors=None)
    folder("deep-card", card_json="[" * 100_000 + "]" * 100_000)
    folder("odd-order", card_json=json.dumps({"order": "first", "name": {"x": 1}}))  # sorting used to raise
    folder("no-arch", config_json=json.dumps({"arch": ["x"], "encoding": "cl100k_base"}))
    (user_dir / "random.bin").write_bytes(os.urandom(4096))
    (user_dir / "card.json").write_text("{")
    catalog.refresh()
    with caplog.at_level(logging.WARNING):
        listed = users(ALICE)
        catalog.refresh()
        again = users(ALICE)
    assert listed == again == ["alice's model", "odd-order"]  # the good ones, the odd card under its folder name
    warned = [r.getMessage() for r in caplog.records if "skipping model folder" in r.getMessage()]
    assert sorted(w.split()[3].rstrip(":") for w in warned) == ["binary-config", "deep-card", "malformed",
                                                                "no-arch"]  # once each
    with pytest.raises(ModelSourceError):
        catalog.load("user:no-weights", "cpu", viewer=ALICE)


def test_a_shipped_model_is_found_by_its_plain_name():
    """What a link's `?model=dates-zh` opens: the key of the one model that name names, for any viewer."""
    from service import catalog

    assert catalog.resolve("dates-zh") == "shipped:dates-zh" == catalog.resolve("shipped:dates-zh")
    assert catalog.resolve("modern-gpt") == "shipped:modern-gpt"
    assert catalog.resolve("course-gpt") == "preset:course-gpt@cl100k_base"
    assert catalog.resolve("no-such-model") is None
    assert all(catalog.resolve(e.key) == e.key for e in catalog.entries())
