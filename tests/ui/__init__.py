"""Tests of the app through Streamlit's AppTest (every page, URL state, languages) and of ui/."""
