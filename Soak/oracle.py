"""The soak's oracle: what ancsd must print, judged from the simulator's own events log.

It knows nothing of ancsd's code. Its model of each phone is built only from what the simulated
phones did (ancs-phone-sim --events: links, subscriptions, every Notification Source event sent,
every Control Point write and the attributes each answer carried) and from what the driver did
(ancsd started or killed, `ancsd action` calls). It reads ancsd's JSON Lines output and checks,
as the items arrive in time order (both sides stamp CLOCK_MONOTONIC; the simulator writes an `ns`
line a few milliseconds after its stamp, which the driver allows for: soak.py SIM_LOG_DELAY):

  shown-known   nothing is shown for a UID the phone did not have in that connection's session
  shown-once    within one connection, a notification is added once (per incarnation of its UID)
  attributes    what is shown equals one of the answers the phone gave for that notification
                (fields may be null only when the line says complete: false)
  removed       a removal is shown only for a notification that was shown and the phone removed
  modified      a modification is shown only for a notification shown in this connection
  actions       every action write the phone gets matches an `ancsd action` call in flight for the
                same phone, UID and action; a call that reports "performed" reached the phone
  stall         while the phone has sent events ancsd has not shown yet, ancsd's output for that
                phone never pauses for more than STALL_SECONDS (a request the phone never answers
                excuses the 5 s ancsd waits for it)
  settled       at a quiet point: every notification the phone holds is shown (unless the phone
                itself said it was gone, ATT 0xA2) with its latest attributes, every shown one the
                phone removed is shown removed, and the connection shown is the phone's current one
"""
import collections
import os
import heapq
import re

STALL_SECONDS = float(os.environ.get("SOAK_STALL_SECONDS", "1.0"))
NS = 1_000_000_000
# ancsd's own waits, as its configuration states them (SessionConfiguration): a request may go
# unanswered for 5 s; after part of a response, 0.4 s of silence ends it. Margins for scheduling.
REQUEST_TIMEOUT = 5.6
QUIET_PERIOD = 0.5

# Notification attribute IDs in the simulator's log → ancsd's output field names.
FIELDS = {"0": "app_id", "1": "title", "2": "subtitle", "3": "message", "5": "date",
          "6": "positive_action", "7": "negative_action"}


class Violation(Exception):
    pass


class Incarnation:
    """One notification as the phone had it: a UID between its Added and its Removed."""
    __slots__ = ("uid", "added_t", "removed_t", "served", "gone", "last_outcome")

    def __init__(self, uid, t):
        self.uid = uid
        self.added_t = t
        self.removed_t = None
        self.served = []          # attribute dicts of every answer the phone gave
        self.gone = False         # the phone's last answer for it was ATT 0xA2
        self.last_outcome = None


class Session:
    """One ANCS session of a phone (the simulator's own numbering)."""

    def __init__(self, number):
        self.number = number
        self.live = {}            # uid → Incarnation
        self.history = collections.defaultdict(list)   # uid → every Incarnation, oldest first

    def incarnation(self, uid, t):
        """The incarnation of `uid` that was alive at time t (or the latest one before t)."""
        for inc in reversed(self.history.get(uid, [])):
            if inc.added_t <= t:
                return inc
        return None


class Shown:
    __slots__ = ("inc", "removed", "attrs", "complete")

    def __init__(self, inc, attrs, complete):
        self.inc = inc
        self.removed = False
        self.attrs = attrs
        self.complete = complete


class Connection:
    """ancsd's `connected` … `disconnected` for one phone, bound to the phone's session then.

    `earlier`: the sessions the phone began after ancsd's previous connection and before
    `session`. When the link dropped and came back within milliseconds before ancsd's line came,
    the line may be the earlier link's: the connection's first shown line then decides."""

    def __init__(self, session, earlier=()):
        self.session = session
        self.earlier = list(earlier)
        self.shown = {}           # uid → Shown (the latest)


def normalise_date(text):
    return re.sub(r"\D", "", text or "")


def matches(line, served, complete):
    """True when the shown line carries the attributes of this answer of the phone."""
    for key, field in FIELDS.items():
        shown = line.get(field)
        want = served.get(key)
        if field == "date":
            if want is not None and want == "":
                want = None
            if shown is None and want is None:
                continue
            if shown is None and not complete:
                continue
            if shown is None or want is None or normalise_date(shown) != normalise_date(want):
                return False
            continue
        if shown is None and (want is None or not complete):
            continue
        if shown != want:
            return False
    return True


class Oracle:
    def __init__(self, devices, starvation=lambda t0, t1: 0):
        self.devices = devices                      # addresses, by index
        self.index = {a: i for i, a in enumerate(devices)}
        self.heap = []
        self.seq = 0
        self.sessions = [{0: Session(0)} for _ in devices]
        self.sim_session = [0 for _ in devices]
        self.link_up = [True for _ in devices]
        self.up_session = [0 for _ in devices]     # the session of each phone's latest link up
        self.bluez_up = True
        self.ancsd_up = False
        self.conns = [None for _ in devices]
        self.bound = [-1 for _ in devices]          # the session of ancsd's latest connection
        self.pending = [dict() for _ in devices]    # uid → since (t_ns) of an output owed
        self.last_output = [0 for _ in devices]
        # Spans in which a phone was silent on purpose: a `slow` answer's delay, the quiet period
        # ancsd waits out after a response that lacks an omitted tuple, a request never answered.
        self.phone_waits = [collections.deque() for _ in devices]
        self.calls = {}                            # call id → call dict
        self.checks = collections.Counter()
        self.shown = collections.Counter()
        self.recent_sim = collections.deque(maxlen=25)
        self.recent_ancsd = collections.deque(maxlen=25)
        self.horizon = 0
        # starvation(t0, t1): how long (ns) the processes on the path from phone to output
        # waited for a CPU between t0 and t1; a stall that only this explains is no stall of ancsd.
        self.starvation = starvation
        self.excused = set()      # (phone, since) of pauses a CPU shortage explains

    # Feeding

    def push(self, t, source, item):
        heapq.heappush(self.heap, (t, self.seq, source, item))
        self.seq += 1

    def advance(self, horizon):
        """Processes every item stamped before `horizon`, in time order, then checks for stalls."""
        while self.heap and self.heap[0][0] <= horizon:
            t, _, source, item = heapq.heappop(self.heap)
            self.horizon = t
            if source == "sim":
                self.recent_sim.append(item)
                self.on_sim(t, item)
            elif source == "ancsd":
                self.recent_ancsd.append(item)
                self.on_ancsd(t, item)
            else:
                self.on_driver(t, item)
        self.horizon = max(self.horizon, horizon)
        self.check_stalls(horizon)

    def fail(self, message):
        raise Violation(message)

    # The phones (simulator events log)

    def session(self, dev, number):
        s = self.sessions[dev].get(number)
        if s is None:
            s = self.sessions[dev][number] = Session(number)
        return s

    def owed(self, dev, uid, t):
        if self.ancsd_up and self.link_up[dev] and self.bluez_up:
            self.pending[dev].setdefault(uid, t)

    def on_sim(self, t, e):
        kind = e["kind"]
        if kind == "bluez":
            self.bluez_up = e["up"]
            if not self.bluez_up:
                for p in self.pending:
                    p.clear()
            return
        dev = e["dev"]
        if kind == "link":
            self.link_up[dev] = e["up"]
            self.sim_session[dev] = e["session"]
            if e["up"]:
                self.up_session[dev] = e["session"]
            self.session(dev, e["session"])
            if not e["up"]:
                self.pending[dev].clear()
            return
        if kind == "subscribed":
            self.sim_session[dev] = e["session"]
            return
        if kind == "ns":
            s = self.session(dev, e["session"])
            uid, event = e["uid"], e["event"]
            if event == "added":
                inc = s.live.get(uid)
                if inc is None:
                    inc = s.live[uid] = Incarnation(uid, t)
                    s.history[uid].append(inc)
                self.owed(dev, uid, t)
            elif event == "modified":
                if uid not in s.live:
                    self.fail(f"the simulator sent Modified for UID {uid} it does not hold (oracle out of step)")
                self.owed(dev, uid, t)
            elif event == "removed":
                inc = s.live.pop(uid, None)
                if inc is not None:
                    inc.removed_t = t
                conn = self.conns[dev]
                shown = conn.shown.get(uid) if conn and conn.session == s.number else None
                if shown and not shown.removed and shown.inc is inc:
                    self.owed(dev, uid, t)
                else:
                    self.pending[dev].pop(uid, None)
            return
        if kind == "cp":
            s = self.session(dev, e["session"])
            request, outcome = e.get("request"), e["outcome"]
            if request == "notification":
                inc = s.live.get(e["uid"]) or s.incarnation(e["uid"], t)
                if inc is None:
                    return
                inc.last_outcome = outcome
                if outcome == "accepted":
                    served = dict(e.get("attributes", {}))
                    if "0" not in served:
                        # With an app filter, ancsd asks the app alone first, then the rest without it.
                        app = next((v["0"] for v in reversed(inc.served) if "0" in v), None)
                        if app is not None:
                            served["0"] = app
                    inc.served.append(served)
                    inc.gone = False
                    # An answer that says what ancsd already shows of this incarnation owes
                    # nothing more: ancsd rightly prints no repeat. (Seed 7207, 3,280 s: the
                    # phone's answer to a replayed notification already carried a modification
                    # whose event came after it; the fetch the event asked for said the same.)
                    conn = self.conns[dev]
                    shown = conn.shown.get(e["uid"]) if conn and conn.session == s.number else None
                    since = self.pending[dev].get(e["uid"])
                    if (since is not None and since <= t and shown and shown.inc is inc and not shown.removed
                            and matches(shown.attrs, served, shown.complete)):
                        del self.pending[dev][e["uid"]]
                elif outcome == "0xa2":
                    # The phone says it is gone: nothing is owed for it until its next event.
                    inc.gone = True
                    self.pending[dev].pop(e["uid"], None)
            waits = self.phone_waits[dev]
            delay = int(e.get("delay", 0) * NS)
            if delay:
                waits.append((t, t + delay))
            if e.get("incomplete"):
                waits.append((t + delay, t + delay + int(QUIET_PERIOD * NS)))
            if outcome == "silent":
                waits.append((t, t + int(REQUEST_TIMEOUT * NS)))
            while waits and waits[0][1] < t - 60 * NS:
                waits.popleft()
            if request == "action":
                self.checks["actions"] += 1
                key = (dev, e["uid"], e["action"])
                match = [c for c in self.calls.values() if c["key"] == key and not c.get("reached")]
                if not match:
                    self.fail(f"phone {self.devices[dev]} got the {e['action']} action on UID {e['uid']}, "
                              f"which no `ancsd action` call in flight asked for")
                match[0]["reached"] = outcome
            return

    # ancsd's output

    def on_ancsd(self, t, line):
        kind = line.get("type")
        dev = self.index.get(line.get("device"))
        if dev is None:
            self.fail(f"ancsd printed a line for an unknown phone: {line}")
        self.last_output[dev] = t
        if kind == "connected":
            # The session ancsd connected to: the phone's current one, or, when the link has
            # dropped again before the line came (the phone numbers the next session at once),
            # the one its last link up began.
            session = self.sim_session[dev] if self.link_up[dev] else self.up_session[dev]
            earlier = sorted(n for n in self.sessions[dev] if self.bound[dev] < n < session)
            self.conns[dev] = Connection(session, earlier)
            self.bound[dev] = session
            return
        if kind == "disconnected":
            self.conns[dev] = None
            self.pending[dev].clear()
            return
        if kind not in ("added", "modified", "removed"):
            return
        self.shown[kind] += 1
        uid = line["uid"]
        conn = self.conns[dev]
        self.checks["connection"] += 1
        if conn is None:
            self.fail(f"ancsd showed {kind} UID {uid} of {line['device']} outside any connection it announced")
        s = self.session(dev, conn.session)
        inc = s.incarnation(uid, t)
        if inc is None and not conn.shown:
            # The first line shown: of a link that came and went before the `connected` line?
            # (Seeds 22 and 101, 600 s, on a loaded machine: the link of session 76 dropped and
            # came back as session 78 within 3.4 ms, and ancsd's `connected` line and the replay
            # of session 76 came after that.) The latest such session that had the UID binds it.
            for number in reversed(conn.earlier):
                inc = self.sessions[dev][number].incarnation(uid, t)
                if inc is not None:
                    conn.session = self.bound[dev] = number
                    s = self.sessions[dev][number]
                    break
        conn.earlier = []
        self.checks["shown-known"] += 1
        if inc is None:
            self.fail(f"ancsd showed {kind} UID {uid} of {line['device']}, which the phone never had in this "
                      f"connection (phone session {conn.session})")
        prior = conn.shown.get(uid)
        if kind == "added":
            self.checks["shown-once"] += 1
            if prior is not None and prior.inc is inc and not prior.removed:
                self.fail(f"ancsd showed UID {uid} of {line['device']} added twice in one connection")
        elif kind == "modified":
            self.checks["modified"] += 1
            if prior is None or prior.inc is not inc or prior.removed:
                self.fail(f"ancsd showed UID {uid} of {line['device']} modified, but never showed it added "
                          f"in this connection")
        else:
            self.checks["removed"] += 1
            if prior is None or prior.inc is not inc or prior.removed:
                self.fail(f"ancsd showed UID {uid} of {line['device']} removed, but it was not shown in this connection")
            if inc.removed_t is None:
                self.fail(f"ancsd showed UID {uid} of {line['device']} removed, but the phone still has it")
            prior.removed = True
            self.pending[dev].pop(uid, None)
            return
        complete = bool(line.get("complete"))
        self.checks["attributes"] += 1
        if inc.served or complete:
            if not any(matches(line, served, complete) for served in inc.served):
                self.fail(f"ancsd showed UID {uid} of {line['device']} with attributes the phone never sent: "
                          f"{ {f: line.get(f) for f in FIELDS.values()} } complete={complete}; the phone sent {inc.served[-3:]}")
        elif any(line.get(f) is not None for f in FIELDS.values() if f != "app_id"):
            self.fail(f"ancsd showed UID {uid} of {line['device']} with text although the phone answered no request for it")
        conn.shown[uid] = Shown(inc, line, complete)
        since = self.pending[dev].get(uid)
        if since is not None and since <= t:
            del self.pending[dev][uid]

    # The driver

    def on_driver(self, t, item):
        kind = item["kind"]
        if kind == "ancsd-started":
            self.ancsd_up = True
        elif kind == "ancsd-killed":
            self.ancsd_up = False
            for dev in range(len(self.devices)):
                self.conns[dev] = None
                self.pending[dev].clear()
        elif kind == "action-start":
            self.calls[item["id"]] = {"key": (item["dev"], item["uid"], item["action"]), "live": item["live"]}
        elif kind == "action-end":
            call = self.calls.pop(item["id"], None)
            if call is None:
                return
            self.checks["action-replies"] += 1
            if item["rc"] == 0 and call.get("reached") != "accepted":
                self.fail(f"`ancsd action` on {self.devices[call['key'][0]]} UID {call['key'][1]} said performed, "
                          f"but the phone never accepted that action (phone saw: {call.get('reached')})")

    # Stalls and quiet points

    def check_stalls(self, horizon):
        for dev in range(len(self.devices)):
            pending = self.pending[dev]
            if not pending or not (self.ancsd_up and self.link_up[dev] and self.bluez_up):
                continue
            self.checks["stall"] += 1
            oldest = min(pending.values())
            since = max(oldest, self.last_output[dev])
            if horizon - since > STALL_SECONDS * NS:
                waited = self.starvation(since, horizon) + self.phone_silence(dev, since, horizon)
                if horizon - since - waited <= STALL_SECONDS * NS:
                    self.excused.add((dev, since))
                    continue
                uid = min(pending, key=pending.get)
                self.fail(f"ancsd's output for {self.devices[dev]} stalled {(horizon - since) / NS:.2f} s while the "
                          f"phone was sending ({len(pending)} events owed, the oldest for UID {uid}; "
                          f"{waited / NS:.2f} s of it spent waiting for a CPU)")

    def silence_end(self):
        """When the last span of deliberate phone silence known so far ends."""
        return max((end for waits in self.phone_waits for _, end in waits), default=0)

    def phone_silence(self, dev, t0, t1):
        """How much of [t0, t1] phone `dev` spent silent on purpose (overlaps counted once)."""
        spans = sorted((max(a, t0), min(b, t1)) for a, b in self.phone_waits[dev] if b > t0 and a < t1)
        total, end = 0, t0
        for a, b in spans:
            a = max(a, end)
            if b > a:
                total += b - a
                end = b
        return total

    def settled(self):
        """At a quiet point (every item processed): what the phones hold is what ancsd shows."""
        for dev, address in enumerate(self.devices):
            if not (self.ancsd_up and self.link_up[dev] and self.bluez_up):
                continue
            conn = self.conns[dev]
            self.checks["settled"] += 1
            if conn is None:
                self.fail(f"{address} is connected and subscribed, but ancsd shows no connection")
            if conn.session != self.sim_session[dev]:
                self.fail(f"ancsd's connection of {address} belongs to phone session {conn.session}, "
                          f"the phone is in session {self.sim_session[dev]}")
            s = self.sessions[dev][conn.session]
            for uid, inc in s.live.items():
                if inc.gone:
                    continue
                self.checks["settled-shown"] += 1
                shown = conn.shown.get(uid)
                if shown is None or shown.inc is not inc or shown.removed:
                    self.fail(f"the phone {address} holds UID {uid} (added {inc.added_t / NS:.3f}), "
                              f"ancsd never showed it in this connection")
                if shown.complete and inc.served and inc.last_outcome == "accepted" \
                        and not matches(shown.attrs, inc.served[-1], True):
                    self.fail(f"ancsd shows UID {uid} of {address} with old attributes: "
                              f"{ {f: shown.attrs.get(f) for f in FIELDS.values()} }, the phone's latest: {inc.served[-1]}")
            for uid, shown in conn.shown.items():
                self.checks["settled-removed"] += 1
                if not shown.removed and shown.inc.removed_t is not None and s.live.get(uid) is not shown.inc:
                    self.fail(f"the phone {address} removed UID {uid}, ancsd never showed it removed")

    def live_uids(self, dev):
        """UIDs ancsd shows now for phone `dev` (not removed), with their latest lines."""
        conn = self.conns[dev]
        if conn is None:
            return {}
        return {u: s.attrs for u, s in conn.shown.items() if not s.removed}

    def gone_uids(self, dev):
        conn = self.conns[dev]
        if conn is None:
            return []
        s = self.sessions[dev].get(conn.session)
        return [u for u, sh in conn.shown.items() if sh.removed and s and u not in s.live]
