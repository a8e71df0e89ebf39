"""Streamlit-side helpers shared by every page: i18n, sidebar state, caches, figure builders, widgets."""
