"""The answer pickers of the analysis pages: the model's top tokens as quick picks, or any text, encoded with the
model's own tokenizer (transformer_core.analysis.answers), with how it was split."""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from transformer_core.analysis.answers import Answer, answer_of_ids, answer_of_text, with_space
from transformer_core.analysis.corruptions import next_word, repeated_name
from transformer_core.errors import InputError
from transformer_core.text.inputs import token_labels

from .errors import show_error
from .figures import quoted, visible
from .i18n import sentences, t
from .state import resend_choices

ss = st.session_state
OTHER = -1  # the quick picks' last option: "any text…"


@dataclass(frozen=True)
class Picked:
    """An answer and how a notebook writes it (the text typed, or the model id picked)."""

    answer: Answer
    typed: bool

    @property
    def spec(self):
        """What the notebook snippet passes: the text typed (read as plain text), else the model ids."""
        if self.typed and not self.answer.special_as_text:
            return self.answer.text
        return self.answer.first if len(self.answer) == 1 else list(self.answer.ids)


def spelled(answer: Answer) -> str:
    """‘ John’ = 1 token (␣John); ‘Johnathan’ = 4 tokens (J | ohn | ath | an)."""
    pieces = " | ".join(visible(x) for x in answer.labels)
    return t("ans_spelled_one" if len(answer) == 1 else "ans_spelled", text=visible(answer.text), n=len(answer),
             pieces=pieces)


def preset_answer(key: str, text: str) -> None:
    """Start a picker (before it is drawn, until the learner changes it) on `text` typed as the answer."""
    if key not in ss:
        ss[key] = OTHER
        ss[f"{key}_text"] = text


def preset_names(text: str, key_a: str, key_b: str) -> tuple[str, str] | None:
    """An IOI text (one name said once, another twice): the two pickers start on its names, the first on the right
    answer (the name said once), the second on the repeated one (until the learner changes them). The names
    (repeated, once), or None."""
    names = repeated_name(text)
    if names:
        preset_answer(key_a, next_word(names[1]))
        preset_answer(key_b, next_word(names[0]))
    return names


def names_note(names: tuple[str, str] | None, a: Picked | None, b: Picked | None, letters: str = "AB") -> None:
    """While the pickers still hold an IOI text's two names, say why (the pair the IOI work measures)."""
    if names and [p and p.answer.text for p in (a, b)] == [next_word(names[1]), next_word(names[0])]:
        st.caption(t("ans_ioi_default", io=names[1], s=names[0], a=letters[0], b=letters[1]))


def several_tokens(model, key: str) -> bool:
    """Does the picker `key` hold (from the last run, or a preset) an answer typed that takes several tokens?"""
    if ss.get(key) != OTHER or not ss.get(f"{key}_text"):
        return False
    try:
        return len(answer_of_text(model, ss[f"{key}_text"], allow_special=bool(ss.get("allow_special")))) > 1
    except InputError:
        return False


def answer_picker(label: str, key: str, model, top_ids: list[int], *, index: int = 0, context=None,
                  disabled: bool = False, container=None) -> Picked | None:
    """A quick pick among `top_ids` (model ids, the model's top next tokens) or any text typed; the answer, or None
    after a message in the learner's language (an empty answer, one the model's vocabulary cannot write...)."""
    box = container or st
    names = {i: quoted(x) for i, x in zip(top_ids, token_labels(model, top_ids, context), strict=True)}
    names[OTHER] = t("ans_other")
    options = [*top_ids, OTHER]
    index = min(index, len(options) - 1)
    # a quick pick among another text's top tokens becomes this text's pick at `index`, set in the session state so
    # that the browser shows it too (left alone, A and B both fell back to this text's first option)
    if key in ss and ss[key] not in options:
        ss[key] = options[index]
    # the value set (a default answer, the learner's pick) is also where the browser starts, should it draw the box
    # afresh: after a run that stopped before it (an empty text B), the browser showed the box's default, kept the
    # server's value out of sight, and sent its default back with the next action (answer Y became answer X)
    index = options.index(ss[key]) if key in ss else index
    # a new answer may relabel the page's controls (the metric's name): every control's value is sent again with it
    pick = box.selectbox(label, options, index=index, key=key, format_func=names.get, disabled=disabled,
                         on_change=resend_choices)
    if disabled:
        return None
    if pick != OTHER:
        return Picked(answer_of_ids(model, [int(pick)]), False)
    text = box.text_input(t("ans_text"), key=f"{key}_text", placeholder=t("ans_placeholder"), help=t("ans_help"),
                          on_change=resend_choices)
    if text == "":
        box.info(t("ans_type"), icon="✍️")
        return None
    try:
        answer = answer_of_text(model, text, allow_special=bool(ss.get("allow_special")))
    except InputError as exc:
        with box.container():
            show_error(exc)
        return None
    notes = [spelled(answer)]
    spaced = with_space(model, answer)
    if spaced is not None:
        notes.append(t("ans_space", spelled=spelled(spaced)))
    if answer.cleaned:
        notes.append(t("ans_cleaned"))
    if answer.special_as_text:
        notes.append(t("ans_special"))
    box.caption(sentences(*notes))
    return Picked(answer, True)
