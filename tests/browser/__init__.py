"""Tests in a real browser: Debian Chromium through Playwright against a Streamlit server."""
