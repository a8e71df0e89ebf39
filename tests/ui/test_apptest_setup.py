"""harness/apptest.py: what a server does once and AppTest did for every test or run, done once a process: the scan
of the installed packages for Streamlit components, and compiling the app's scripts (again only after an edit)."""
import os

from streamlit.components.v2 import manifest_scanner

from harness.apptest import APP, _compiled, open_app


def test_a_second_apptest_scans_no_package_and_compiles_no_script():
    _compiled._cache.pop(APP, None)
    open_app()
    scans, code = manifest_scanner.scan_component_manifests.cache_info(), _compiled._cache[APP]  # AppTest's cache
    open_app()
    after = manifest_scanner.scan_component_manifests.cache_info()
    assert after.misses == scans.misses <= 1 and after.hits > scans.hits  # asked again, answered from the cache
    assert _compiled._cache[APP] is code


def test_an_edited_script_is_compiled_again(tmp_path):
    script = tmp_path / "page.py"
    script.write_text("x = 1\n", encoding="utf-8")
    first = _compiled.get_bytecode(str(script))
    assert _compiled.get_bytecode(str(script)) is first
    script.write_text("x = 22\n", encoding="utf-8")
    os.utime(script, ns=(0, os.stat(script).st_mtime_ns + 1))  # a later time, even on a coarse clock
    again = _compiled.get_bytecode(str(script))
    assert again is not first and 22 in again.co_consts
