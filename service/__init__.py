"""What a shared server needs around the core: settings, the model catalog, uploads, training jobs.
No tensor math and no Streamlit here."""
