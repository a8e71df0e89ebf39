"""The kit tests/ and bench/ share (import it from the repository root: `from harness.server import start_app`).

- server: start `streamlit run app.py` on a free port (its own checkpoints folder, settings), watch and stop it
- browser: Debian Chromium through Playwright, waits for a script run to be over, reading and acting on a page
- st_protocol: a browser stand-in speaking Streamlit's websocket protocol (many learners, no DOM)
- apptest: open the app in Streamlit's AppTest on a page, read what it shows
- model_files: model files for uploads, hostile ones included; hf_models: tiny Hugging Face decoders and tokenizers

Nothing here imports tests/ or bench/. server, browser and model_files import without Playwright or torch (those
load when a browser starts or a model is made); apptest needs Streamlit, hf_models `tokenizers`.
"""
