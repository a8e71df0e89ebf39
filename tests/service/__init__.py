"""Tests of service/: settings, catalog, budget, uploads, jobs, URL state, downloads, deploy, memory estimates."""
