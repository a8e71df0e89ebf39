"""Positional encodings as data: PE similarity, the model's position table, the √d_model balance."""
import math

import pytest
import torch

from transformer_core import build_model, preset
from transformer_core.analysis.positions import (
    pe_similarity,
    position_table,
    scale_balance,
    similarity,
)
from transformer_core.model.positional import sinusoid_table


def test_course_small_pe_table_row_one():
    pe = sinusoid_table(6, 4)
    assert [round(float(x), 4) for x in pe[1]] == [0.8415, 0.5403, 0.0100, 0.9999]  # as the course prints it
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))


def test_pe_similarity_is_gram_matrix_of_the_table():
    table = sinusoid_table(10, 16)
    torch.testing.assert_close(pe_similarity(10, 16), table @ table.T)


def test_pe_similarity_diagonal_is_half_d_model():
    torch.testing.assert_close(pe_similarity(12, 32).diagonal(), torch.full((12,), 16.0), atol=1e-4, rtol=0)


def test_pe_similarity_depends_only_on_the_offset():
    sim = pe_similarity(20, 8)
    for offset in range(1, 6):
        band = sim.diagonal(offset)
        torch.testing.assert_close(band, torch.full_like(band, float(band[0])), atol=1e-4, rtol=0)
    torch.testing.assert_close(sim, sim.T)
    omega = 10000 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    assert float(sim[3, 0]) == pytest.approx(float(torch.cos(omega * 3).sum()), abs=1e-4)


def test_position_table_sinusoidal_is_the_formula():
    model = build_model(preset("tiny"), "cpu")
    torch.testing.assert_close(position_table(model, 5, "encoder"), sinusoid_table(5, 16))
    assert position_table(model, 10_000, "decoder").shape == (64, 16)  # capped at max_len


def test_position_table_learned_returns_the_weights():
    model = build_model(preset("tiny-gpt", positional="learned"), "cpu")
    torch.testing.assert_close(position_table(model, 7), model.decoder.embed.pos.weight[:7].detach())


def test_position_table_none_is_zeros():
    model = build_model(preset("tiny-gpt", positional="none"), "cpu")
    assert torch.equal(position_table(model, 4), torch.zeros(4, 16))


def test_similarity_of_a_table():
    table = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert similarity(table).tolist() == [[1.0, 1.0], [1.0, 2.0]]


def test_scale_balance_means_and_factor():
    tok = torch.tensor([[1.0, -3.0, 2.0, -2.0]])  # mean |x| = 2, d = 4
    pe = torch.tensor([[0.5, -0.5, 0.5, -0.5]])
    bal = scale_balance(tok, tok * 2, pe)
    assert bal == {"tok": 2.0, "scaled": 4.0, "sqrt_scaled": 4.0, "pe": 0.5, "factor": math.sqrt(4)}
