"""A minimal Streamlit browser stand-in speaking the app's own websocket protocol (no DOM, no JS).

One `StreamlitClient` is one browser tab: it opens `/_stcore/stream`, sends `BackMsg.rerun_script` requests
with the full set of widget states the way streamlit's frontend does, and reads the `ForwardMsg`s back until
the run's `script_finished`. Widgets are found by the user key embedded in their element id
(`$$ID-<hash>-<key>`), pages by the url path the `navigation` message lists. What it mirrors from the
frontend (streamlit 1.67: App.tsx sendRerunBackMsg / onPageChange, WidgetStateManager, ForwardMessageCache,
WebsocketConnection; checked against Chromium's frames by bench/protocol_check.py):

- connect: GET /_stcore/health and /_stcore/host-config, then the websocket with subprotocols
  ["streamlit", <xsrf token or placeholder>]; the first rerun has no widget states, page_script_hash "" and
  page_name = the url path ("" for the main page); the query string is the URL's.
- widget states: a widget's state is created when its element first arrives (its default, or the proto's
  current value when `set_value` is set; otherwise a state the client already holds is kept); after a run
  that finished successfully the states of widgets that were not in it are dropped (removeInactive).
  Every rerun sends all held states; a button press adds `trigger_value` for that one request only.
  Value fields as the 1.67 server registers them: selectbox/radio `string_value` (the formatted option),
  text `string_value`, checkbox `bool_value`, slider `double_array_value` (select_slider
  `string_array_value`), number_input `int_value` (INT) or `double_value`, multiselect `string_array_value`.
- page change: rerun with the target page's `page_script_hash`, query string "" (streamlit clears non-embed
  params on a page change), and only the states of widgets that are not the old page's own (the entry
  script's, e.g. the sidebar).
- `page_info_changed` sets the query string later reruns send; `navigation` gives the pages (url path ->
  page_script_hash) and the current page.
- forward-message cache: cacheable messages (metadata.cacheable) are kept by hash, their hashes go out in
  `cached_message_hashes`; a `ref_hash` message is resolved from that cache; entries expire after
  `max_cached_message_age` (new_session.config) finished runs. There is no ack and no HTTP fetch in 1.67.
- pings: the server sends websocket-protocol pings (uvicorn); the `websockets` library answers them.
  The frontend sends no application-level keepalive (`app_heartbeat` is only for a hosting iframe).
- compression: like Chromium, the client offers permessage-deflate; a server with
  server.enableWebsocketCompression accepts it. `RunResult.wire_bytes` counts what crossed the socket (the
  compressed frames, as a venue's Wi-Fi carries them), `n_bytes` the messages after decompression.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import websockets
from streamlit.proto.Alert_pb2 import Alert
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.NumberInput_pb2 import NumberInput
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection

FINISHED = ForwardMsg.ScriptFinishedStatus
DONE_STATUSES = {FINISHED.FINISHED_SUCCESSFULLY, FINISHED.FINISHED_WITH_COMPILE_ERROR,
                 FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}
# element types that hold a widget state in the frontend, and the WidgetState field each one uses
VALUE_WIDGETS = {"selectbox", "radio", "text_area", "text_input", "checkbox", "slider", "number_input",
                 "multiselect", "color_picker"}
TRIGGER_WIDGETS = {"button", "download_button"}
VIEW_WIDGETS = {"bidi_component"}  # a components.v2 view: no state until its script sets one (set_view_state)


class ProtocolError(Exception):
    """The app answered in a way a browser would show as broken (or did not answer)."""


class MissingWidget(ProtocolError):
    pass


def user_key(element_id: str) -> str | None:
    """The user key of a widget id `$$ID-<hash>-<key>` (None when the widget has no key)."""
    if not element_id.startswith("$$ID-"):
        return None
    key = element_id.split("-", 2)[-1]
    return None if key == "None" else key


@dataclass
class Widget:
    id: str
    kind: str  # the Element oneof name: "selectbox", "slider", ...
    proto: object  # the element's own proto (Selectbox, Slider, ...)
    script_hash: str  # metadata.active_script_hash: which script (entry or page) rendered it
    fragment_id: str = ""  # the fragment that drew it: a change reruns that fragment only, as in a browser

    @property
    def key(self) -> str | None:
        return user_key(self.id)

    @property
    def options(self) -> list[str]:
        return list(getattr(self.proto, "options", []))

    @property
    def disabled(self) -> bool:
        return bool(getattr(self.proto, "disabled", False))


@dataclass
class RunResult:
    """One rerun request: how long until its script_finished, and what went wrong on the way."""
    elapsed: float = 0.0
    status: str = ""
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # st.warning alerts (the app's way to refuse input)
    n_msgs: int = 0
    n_bytes: int = 0
    n_elements: int = 0
    n_refs: int = 0  # ref_hash messages resolved from the forward-message cache
    wire_bytes: int = 0  # bytes received on the socket during the run (compressed frames, frame headers)
    first_msg: float | None = None  # seconds from the send to the first ForwardMsg of the run


def _initial_state(w: Widget, held: WidgetState | None) -> WidgetState | None:
    """The state the frontend gives a widget when its element arrives (None: no state)."""
    p = w.proto
    if not p.set_value and held is not None:
        return held
    st = WidgetState(id=w.id)
    k = w.kind
    if k in ("selectbox", "radio"):
        if p.set_value:
            if not p.HasField("raw_value"):
                return None
            st.string_value = p.raw_value
        elif p.HasField("default") and len(p.options) > p.default:
            st.string_value = p.options[p.default]
        else:
            return None
    elif k in ("text_area", "text_input"):
        src = "value" if p.set_value else "default"
        if not p.HasField(src):
            return None
        st.string_value = getattr(p, src)
    elif k == "checkbox":
        st.bool_value = p.value if p.set_value else p.default
    elif k == "slider":
        if p.options:  # select_slider: option strings
            vals = list(p.raw_value) if p.set_value else [p.options[int(i)] for i in p.default]
            st.string_array_value.data.extend(vals)
        else:
            st.double_array_value.data.extend(list(p.value) if p.set_value else list(p.default))
    elif k == "number_input":
        src = "value" if p.set_value else "default"
        if not p.HasField(src):
            return None
        v = getattr(p, src)
        if p.data_type == NumberInput.INT:
            st.int_value = int(v)
        else:
            st.double_value = float(v)
    elif k == "multiselect":
        vals = list(p.raw_values) if p.set_value else [p.options[i] for i in p.default]
        st.string_array_value.data.extend(vals)
    elif k == "color_picker":
        st.string_value = p.value if p.set_value else p.default
    else:
        return None
    return st


def widget_value_state(w: Widget, value) -> WidgetState:
    """The WidgetState a user's change of widget `w` to `value` produces (value: an option string, an
    option index, a number, a bool, a list ...)."""
    st = WidgetState(id=w.id)
    k, p = w.kind, w.proto
    if k in ("selectbox", "radio"):
        opts = list(p.options)
        if isinstance(value, str) and value in opts:
            st.string_value = value
        elif str(value) in opts:
            st.string_value = str(value)
        elif isinstance(value, int) and 0 <= value < len(opts):
            st.string_value = opts[value]
        else:
            raise ProtocolError(f"{w.key!r}: {value!r} is not one of {opts[:10]}")
    elif k in ("text_area", "text_input", "color_picker"):
        st.string_value = str(value)
    elif k == "checkbox":
        st.bool_value = bool(value)
    elif k == "slider":
        vals = value if isinstance(value, (list, tuple)) else [value]
        if p.options:
            st.string_array_value.data.extend(str(v) for v in vals)
        else:
            st.double_array_value.data.extend(float(v) for v in vals)
    elif k == "number_input":
        if p.data_type == NumberInput.INT:
            st.int_value = int(value)
        else:
            st.double_value = float(value)
    elif k == "multiselect":
        st.string_array_value.data.extend(str(v) for v in value)
    else:
        raise ProtocolError(f"{w.key!r}: cannot set a value on a {k}")
    return st


async def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """A tiny HTTP/1.0 GET (the frontend's init pings) without pulling in an HTTP client."""
    u = urlsplit(url)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(u.hostname, u.port or 80), timeout)
    try:
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {u.netloc}\r\nAccept: */*\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body


class CountingConnection(ClientConnection):
    """A client websocket that counts the bytes its socket receives (before the frames are decompressed)."""

    wire_in = 0

    def data_received(self, data: bytes) -> None:
        self.wire_in += len(data)
        super().data_received(data)


class StreamlitClient:
    """One simulated browser tab on a Streamlit app (use within one asyncio loop)."""

    def __init__(self, base_url: str, *, timeout: float = 60.0, locale: str = "en-US", timezone: str = "UTC"):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.locale, self.timezone = locale, timezone
        self.ws = None
        self.session_id = ""
        self.main_script_hash = ""
        self.page_hash = ""  # current page (from the latest navigation message)
        self.pages: dict[str, str] = {}  # url path ("" = default page) -> page_script_hash
        self.page_names: dict[str, str] = {}  # page_script_hash -> page title
        self.query_string = ""
        self.path = "/"
        self.widgets: dict[str, Widget] = {}  # id -> widget seen in the latest (or running) run
        self.states: dict[str, WidgetState] = {}  # id -> state held, as WidgetStateManager holds it
        self.max_cached_age = 2
        self._cache: dict[str, list] = {}  # hash -> [encoded ForwardMsg, run count when last used]
        self._run_count = 0
        self._reader: asyncio.Task | None = None
        self._run: RunResult | None = None
        self._run_done: asyncio.Future | None = None
        self._run_ids: set[str] = set()
        self._run_widgets: dict[str, Widget] = {}
        self._saw_new_session = False
        self._t_send = 0.0
        self.closed_reason: str | None = None
        self.last_rerun: BackMsg | None = None  # the latest rerun_script sent
        self.last_warnings: list[str] = []  # st.warning texts of the latest finished run
        self.bytes_in = 0
        self.msgs_in = 0

    # --- connection -------------------------------------------------------------------------------
    async def connect(self, init_pings: bool = True) -> None:
        if init_pings:  # the frontend's doInitPings, before the websocket
            for ep in ("_stcore/health", "_stcore/host-config"):
                status, _ = await http_get(f"{self.base_url}/{ep}")
                if status != 200:
                    raise ProtocolError(f"GET /{ep} answered {status}")
        u = urlsplit(self.base_url)
        ws_url = f"{'wss' if u.scheme == 'https' else 'ws'}://{u.netloc}{u.path}/_stcore/stream"
        self.ws = await asyncio.wait_for(websockets.connect(
            ws_url, subprotocols=["streamlit", "PLACEHOLDER_AUTH_TOKEN"], origin=f"{u.scheme}://{u.netloc}",
            max_size=None, compression="deflate", ping_interval=None, open_timeout=self.timeout,
            create_connection=CountingConnection), self.timeout)
        self.closed_reason = None
        self._reader = asyncio.create_task(self._read_loop())

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # closing anyway
                await self._reader
        self.ws = self._reader = None

    # --- high level actions -------------------------------------------------------------------------
    async def open(self, path: str = "/", query_string: str = "") -> RunResult:
        """Connect (if needed) and run the app as a browser loading base_url + path + ?query does."""
        if self.ws is None:
            await self.connect()
        self.path, self.query_string = path, query_string
        return await self.rerun(page_script_hash="", page_name=path.strip("/"), widget_states=[])

    async def goto(self, url_path: str) -> RunResult:
        """Click the navigation link of the page with this url path ("" = the default page)."""
        url_path = url_path.strip("/")
        if url_path not in self.pages:
            raise MissingWidget(f"no page with url path {url_path!r} (pages: {sorted(self.pages)})")
        target = self.pages[url_path]
        keep = [s for i, s in self.states.items()  # the entry script's widgets (sidebar), not the old page's
                if i in self.widgets and self.widgets[i].script_hash != self.page_hash]
        if target != self.page_hash:
            self.query_string = ""
        self.path = "/" + url_path
        res = await self.rerun(page_script_hash=target, widget_states=keep)
        if not res.errors and self.page_hash != target:
            res.errors.append(f"wrong page: wanted {url_path!r}, got {self.page_names.get(self.page_hash)!r}")
        return res

    def widget(self, key: str) -> Widget:
        for w in self.widgets.values():
            if w.key == key:
                return w
        said = f" (the page warned: {self.last_warnings[0][:120]!r})" if self.last_warnings else ""
        raise MissingWidget(f"no widget with key {key!r} on {self.path}{said}")

    def value(self, key: str):
        """The value this client holds for a widget (what the browser shows)."""
        st = self.states.get(self.widget(key).id)
        if st is None or st.WhichOneof("value") is None:
            return None
        v = getattr(st, st.WhichOneof("value"))
        return list(v.data) if hasattr(v, "data") else v

    async def set_value(self, key: str, value) -> RunResult:
        """Change one widget as a user does (the others keep their held states)."""
        w = self.widget(key)
        if w.disabled:
            raise ProtocolError(f"widget {key!r} is disabled")
        self.states[w.id] = widget_value_state(w, value)
        return await self.rerun(fragment_id=w.fragment_id)

    async def set_view_state(self, key: str, name: str, value) -> RunResult:
        """What a components.v2 view's setStateValue(name, value) sends: the view's whole state as JSON."""
        w = self.widget(key)
        if w.kind not in VIEW_WIDGETS:
            raise ProtocolError(f"widget {key!r} is a {w.kind}, not a components.v2 view")
        held = self.states.get(w.id)
        state = json.loads(held.json_value) if held is not None and held.json_value else {}
        self.states[w.id] = WidgetState(id=w.id, json_value=json.dumps({**state, name: value}))
        return await self.rerun(fragment_id=w.fragment_id)

    async def click(self, key: str) -> RunResult:
        """Press a button: its trigger_value goes out with this one request only."""
        w = self.widget(key)
        if w.kind not in TRIGGER_WIDGETS:
            raise ProtocolError(f"widget {key!r} is a {w.kind}, not a button")
        if w.disabled:
            raise ProtocolError(f"button {key!r} is disabled")
        trig = WidgetState(id=w.id, trigger_value=True)
        return await self.rerun(extra=[trig])

    # --- the protocol -------------------------------------------------------------------------------
    def _rerun_msg(self, page_script_hash, page_name, widget_states, extra, fragment_id="") -> BackMsg:
        msg = BackMsg()
        r = msg.rerun_script
        r.query_string = self.query_string
        r.fragment_id = fragment_id
        r.page_script_hash = self.page_hash if page_script_hash is None else page_script_hash
        r.page_name = page_name
        states = list(self.states.values()) if widget_states is None else list(widget_states)
        extra_ids = {s.id for s in extra}
        r.widget_states.widgets.extend([s for s in states if s.id not in extra_ids] + list(extra))
        r.cached_message_hashes.extend(self._cache)
        c = r.context_info
        c.timezone, c.timezone_offset, c.locale = self.timezone, 0, self.locale
        c.url, c.is_embedded, c.color_scheme = self.base_url + self.path, False, "light"
        return msg

    async def rerun(self, *, page_script_hash: str | None = None, page_name: str = "",
                    widget_states: list | None = None, extra: tuple = (), fragment_id: str = "") -> RunResult:
        """Send one rerun_script and wait for the script_finished of the run it starts."""
        if self.ws is None or self.closed_reason:
            raise ProtocolError(f"not connected ({self.closed_reason})")
        if self._run_done is not None and not self._run_done.done():
            raise ProtocolError("a run is already in flight")
        msg = self._rerun_msg(page_script_hash, page_name, widget_states, extra, fragment_id)
        self.last_rerun = msg
        self._run = res = RunResult()
        self._run_done = asyncio.get_running_loop().create_future()
        self._run_ids, self._run_widgets, self._saw_new_session = set(), {}, False
        self._t_send = t0 = time.perf_counter()
        wire = self.ws.wire_in
        try:
            await self.ws.send(msg.SerializeToString())
            await asyncio.wait_for(asyncio.shield(self._run_done), self.timeout)
        except TimeoutError:
            res.errors.append(f"timeout after {self.timeout:.0f} s")
            res.status = "TIMEOUT"
        except (websockets.ConnectionClosed, ProtocolError, OSError) as exc:
            res.errors.append(f"disconnect: {exc}")
            res.status = "DISCONNECTED"
        finally:
            res.elapsed = time.perf_counter() - t0
            res.wire_bytes = self.ws.wire_in - wire
            self._run = None
        return res

    async def _read_loop(self) -> None:
        try:
            async for data in self.ws:
                self.bytes_in += len(data)
                self.msgs_in += 1
                msg = ForwardMsg()
                msg.ParseFromString(data)
                if self._run is not None:
                    if self._run.first_msg is None:
                        self._run.first_msg = time.perf_counter() - self._t_send
                    self._run.n_msgs += 1
                    self._run.n_bytes += len(data)
                msg = self._through_cache(msg, data)
                self._handle(msg)
        except websockets.ConnectionClosed as exc:
            self.closed_reason = f"closed ({exc.code})"
        except Exception as exc:  # noqa: BLE001 - reported on the run in flight
            self.closed_reason = f"reader failed: {type(exc).__name__}: {exc}"
        else:
            self.closed_reason = "closed"
        if self._run_done is not None and not self._run_done.done():
            self._run_done.set_exception(ProtocolError(self.closed_reason))

    def _through_cache(self, msg: ForwardMsg, data: bytes) -> ForwardMsg:
        """ForwardMessageCache.processMessagePayload: keep cacheable messages, resolve references."""
        if msg.WhichOneof("type") == "ref_hash":
            entry = self._cache.get(msg.ref_hash)
            if entry is None:
                self._error(f"cache miss for ref_hash {msg.ref_hash}")
                return msg
            entry[1] = self._run_count
            if self._run is not None:
                self._run.n_refs += 1
            full = ForwardMsg()
            full.ParseFromString(entry[0])
            full.metadata.CopyFrom(msg.metadata)
            return full
        if msg.metadata.cacheable and msg.hash:
            if msg.hash in self._cache:
                self._cache[msg.hash][1] = self._run_count
            else:
                self._cache[msg.hash] = [data, self._run_count]
        return msg

    def _error(self, text: str) -> None:
        if self._run is not None:
            self._run.errors.append(text)

    def _handle(self, msg: ForwardMsg) -> None:
        t = msg.WhichOneof("type")
        if t == "delta":
            self._delta(msg)
        elif t == "new_session":
            ns = msg.new_session
            self._saw_new_session = True
            if ns.initialize.session_id:
                self.session_id = ns.initialize.session_id
            self.main_script_hash = ns.main_script_hash
            self.max_cached_age = ns.config.max_cached_message_age or self.max_cached_age
            if ns.page_script_hash and not self.pages:
                self.page_hash = ns.page_script_hash
        elif t == "navigation":
            self.pages = {p.url_pathname: p.page_script_hash for p in msg.navigation.app_pages}
            self.page_names = {p.page_script_hash: p.page_name for p in msg.navigation.app_pages}
            self.page_hash = msg.navigation.page_script_hash
        elif t == "page_info_changed":
            self.query_string = msg.page_info_changed.query_string
        elif t == "page_not_found":
            self._error(f"page not found: {msg.page_not_found.page_name!r}")
        elif t == "session_event":
            ev = msg.session_event
            if ev.WhichOneof("type") == "script_compilation_exception":
                self._error(f"compile error: {ev.script_compilation_exception.message[:200]}")
        elif t == "script_finished":
            self._finished(msg.script_finished)
        # session_status_changed, page_config_changed, logo, git_info_changed, page_profile, auto_rerun,
        # heartbeat_ack ...: nothing a simulated learner needs

    def _delta(self, msg: ForwardMsg) -> None:
        d = msg.delta
        if d.WhichOneof("type") != "new_element":
            return
        el = d.new_element
        kind = el.WhichOneof("type")
        if self._run is not None:
            self._run.n_elements += 1
        if kind == "exception":
            e = el.exception
            self._error(f"exception: {e.type}: {e.message[:200]}")
        elif kind == "alert" and el.alert.format == Alert.ERROR:
            self._error(f"st.error: {el.alert.body[:200]}")
        elif kind == "alert" and el.alert.format == Alert.WARNING and self._run is not None:
            self._run.warnings.append(el.alert.body[:200])
        if kind in VALUE_WIDGETS or kind in TRIGGER_WIDGETS or kind in VIEW_WIDGETS:
            proto = getattr(el, kind)
            if not proto.id:
                return
            w = Widget(proto.id, kind, proto, msg.metadata.active_script_hash, d.fragment_id)
            self._run_ids.add(w.id)
            self._run_widgets[w.id] = w
            self.widgets[w.id] = w
            if kind in VALUE_WIDGETS:
                st = _initial_state(w, self.states.get(w.id))
                if st is not None:
                    self.states[w.id] = st

    def _finished(self, status) -> None:
        if status == FINISHED.FINISHED_SUCCESSFULLY:
            # clearStaleNodes + removeInactive: only this run's widgets remain
            self.widgets = dict(self._run_widgets)
            self.states = {i: s for i, s in self.states.items() if i in self._run_ids}
        elif status == FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY:  # the widgets outside the fragment stay
            self.widgets.update(self._run_widgets)
        if status != FINISHED.FINISHED_EARLY_FOR_RERUN and self._saw_new_session:
            self._run_count += 1  # ForwardMsgCache.incrementRunCount
            self._cache = {h: e for h, e in self._cache.items() if self._run_count - e[1] <= self.max_cached_age}
        if status == FINISHED.FINISHED_WITH_COMPILE_ERROR:
            self._error("script finished with a compile error")
        if self._run is not None and status in DONE_STATUSES and self._saw_new_session:
            self._run.status = FINISHED.Name(status)
            self.last_warnings = list(self._run.warnings)
            if self._run_done is not None and not self._run_done.done():
                self._run_done.set_result(None)


def random_other(options: list, current, rng: random.Random):
    """A random option other than the current one (the current one when it is the only option)."""
    others = [o for o in options if o != current]
    return rng.choice(others) if others else current
