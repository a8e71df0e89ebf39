import streamlit as st

from ui.session import through_app

through_app()
st.write("todo")
