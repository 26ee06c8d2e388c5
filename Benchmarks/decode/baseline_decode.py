#!/usr/bin/env python3
"""The Python baseline of the decode benchmark (make bench): an ancs-capture/1 decoder written
plainly, standard library only, doing what `ancsd decode` does for well-formed traffic.

  baseline_decode.py FILE > OUT

json.loads per line, bytes.fromhex, a straightforward Data Source reassembler (bytes appended
to a buffer, parsed again from the start after each notification value), json.dumps per output
record. For the benchmark's capture its output equals ancsd's, line for line.
"""
import json
import struct
import sys

EVENTS = ["added", "modified", "removed"]
FLAGS = [(1, "silent"), (2, "important"), (4, "pre_existing"), (8, "positive_action"), (16, "negative_action")]
CATEGORIES = ["other", "incoming_call", "missed_call", "voicemail", "social", "schedule", "email", "news",
              "health_and_fitness", "business_and_finance", "location", "entertainment"]
COMMANDS = ["get_notification_attributes", "get_app_attributes", "perform_notification_action"]
ATTRIBUTES = ["app_identifier", "title", "subtitle", "message", "message_size", "date",
              "positive_action_label", "negative_action_label"]


def dumps(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def ns_json(b):
    event, flags, category, count, uid = struct.unpack("<BBBBI", b)
    return {"char": "ns", "event": EVENTS[event] if event < 3 else "reserved", "event_id": event, "uid": uid,
            "flags": [name for bit, name in FLAGS if flags & bit], "flags_raw": flags,
            "category": CATEGORIES[category] if category < 12 else "reserved", "category_id": category,
            "category_count": count}


def parse_cp(b):
    """(json, request) for a GetNotificationAttributes request: request = (uid, [ids])."""
    uid = struct.unpack_from("<I", b, 1)[0]
    attributes, ids, i = [], [], 5
    while i < len(b):
        aid = b[i]
        entry = {"id": aid, "name": ATTRIBUTES[aid]}
        i += 1
        if aid in (1, 2, 3):
            entry["max_length"] = struct.unpack_from("<H", b, i)[0]
            i += 2
        attributes.append(entry)
        ids.append(aid)
    return {"char": "cp", "command": COMMANDS[b[0]], "uid": uid, "attributes": attributes}, (uid, ids)


def try_parse(buffer, ids):
    """The response's attributes if every requested tuple is in `buffer`, else None."""
    i, attributes = 5, []
    while len(attributes) < len(ids):
        if i + 3 > len(buffer):
            return None
        aid, length = buffer[i], struct.unpack_from("<H", buffer, i + 1)[0]
        if i + 3 + length > len(buffer):
            return None
        attributes.append((aid, buffer[i + 3:i + 3 + length]))
        i += 3 + length
    return attributes


def attribute_json(aid, value):
    try:
        text, valid = value.decode("utf-8"), True
    except UnicodeDecodeError:
        text, valid = value.decode("utf-8", "replace"), False
    entry = {"id": aid, "name": ATTRIBUTES[aid], "length": len(value), "value": text, "utf8_valid": valid}
    if not valid:
        entry["value_hex"] = value.hex()
    if aid == 5:
        if not value:
            entry["date"] = None
        else:
            d = value.decode()
            entry["date"] = f"{d[0:4]}-{d[4:6]}-{d[6:8]}T{d[9:11]}:{d[11:13]}:{d[13:15]}"
    elif aid == 4:
        entry["message_size"] = int(value) if value.isdigit() and len(value) <= 9 else None
    return entry


def ds_json(uid, attributes):
    out = {"char": "ds", "response": "notification_attributes", "uid": uid, "complete": True, "missing": [],
           "attributes": [attribute_json(aid, value) for aid, value in attributes]}
    values = dict(attributes)
    if 3 in values and 4 in values and values[4].isdigit():
        message = values[3].decode("utf-8", "replace")
        if message.endswith("\u2026"):
            message = message[:-1]
        out["truncated"] = int(values[4]) > max(len(message.encode("utf-16-le")) // 2, len(message.encode()))
    return out


def main():
    out = sys.stdout
    request, buffer = None, b""
    with open(sys.argv[1], "rb") as f:
        for line in f:
            record = json.loads(line)
            if "format" in record:
                continue
            data = bytes.fromhex(record["hex"])
            char = record["char"]
            if char == "ns":
                out.write(dumps(ns_json(data)) + "\n")
            elif char == "cp":
                cp, request = parse_cp(data)
                buffer = b""
                out.write(dumps(cp) + "\n")
            elif char == "ds" and request is not None:
                buffer += data
                attributes = try_parse(buffer, request[1])
                if attributes is not None:
                    out.write(dumps(ds_json(request[0], attributes)) + "\n")
                    request, buffer = None, b""


if __name__ == "__main__":
    main()
