"""The test suite, by layer: core/, service/, ui/ (AppTest), browser/ (Chromium); project-wide checks here."""
