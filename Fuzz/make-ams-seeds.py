#!/usr/bin/env python3
"""Writes Fuzz/seeds-ams/: conversations for the ams fuzz target (Fuzz/formats/AMSFuzz.swift).

Each seed is a list of operations in the target's input format: a byte choosing the operation
(op % 8), then its arguments.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds-ams")


def subscribe(mask=0x07):
    return bytes([0, mask])


def entity_update(entity, attribute, text, flags=0):
    value = bytes([entity, attribute, flags]) + (text.encode() if isinstance(text, str) else text)
    return bytes([1, len(value)]) + value


def commands(ids):
    return bytes([2, len(ids)]) + bytes(ids)


def written():
    return bytes([3, 0])


def read(text):
    value = text.encode() if isinstance(text, str) else text
    return bytes([3, 1, len(value)]) + value


def att_error(code):
    return bytes([3, 2, code])


def failed():
    return bytes([3, 3])


def advance(tens_of_ms):
    return bytes([4, tens_of_ms])


def send(command):
    return bytes([5, command])


def timer():
    return bytes([6])


def registrations():
    return subscribe() + written() * 3


TRACK = (entity_update(2, 0, "Queen") + entity_update(2, 1, "A Night at the Opera")
         + entity_update(2, 2, "Bohemian Rhapsody") + entity_update(2, 3, "354.0"))
PLAYER = entity_update(0, 0, "Music") + entity_update(0, 1, "1,1.0,30.5") + entity_update(0, 2, "0.5")
QUEUE = entity_update(1, 0, "3") + entity_update(1, 1, "12") + entity_update(1, 2, "1") + entity_update(1, 3, "2")

SEEDS = {
    "start": registrations() + commands([0, 1, 2, 3, 4]) + PLAYER + QUEUE + TRACK + advance(20),
    "coalesce": registrations() + entity_update(2, 2, "One") + advance(5) + entity_update(2, 2, "Two") + advance(20)
    + entity_update(2, 2, "Two") + advance(20),
    "truncated": registrations() + entity_update(2, 2, "A very long ti", 1) + written() + advance(50)
    + read("A very long title indeed") + advance(20),
    "stale": registrations() + entity_update(2, 2, "Old long", 1) + written() + entity_update(2, 2, "New")
    + read("Old long title") + advance(20),
    "hold": registrations() + entity_update(2, 1, "An album, cut", 1) + written() + advance(250) + read("x") + timer(),
    "absent": registrations() + entity_update(2, 0, "Art", 1) + written() + att_error(0xA2) + advance(20),
    "invalid-state": subscribe() + att_error(0xA0) + subscribe() + att_error(0xA0) + advance(255) + advance(255)
    + subscribe() + att_error(0xA0),
    "invalid-command": subscribe() + att_error(0xA1) + failed() + att_error(0x0E),
    "commands": registrations() + commands([0, 1, 2, 3, 4, 5, 6]) + send(2) + written() + send(3) + att_error(0x0E)
    + send(9) + send(0) + failed() + written(),
    "subset-rc": subscribe(0x01) + commands([0, 1]) + send(1) + written() + entity_update(2, 2, "x") + advance(20),
    "subset-eu": subscribe(0x02) + written() * 3 + entity_update(2, 2, "Cut", 1) + advance(20) + send(0),
    "malformed": registrations() + bytes([1, 0]) + bytes([1, 1, 2]) + bytes([1, 2, 2, 2])
    + entity_update(7, 0, "x") + entity_update(2, 9, "x") + entity_update(2, 2, b"A\xffB")
    + entity_update(0, 1, "x,nan,1e999") + entity_update(0, 2, "loud") + entity_update(2, 3, "-3")
    + commands([0x20, 0, 0x20]) + bytes([7, 2, 0xFF, 0xEE]) + bytes([0x87, 1, 0]) + advance(20),
    "position": registrations() + entity_update(0, 1, "1,2.0,10") + entity_update(2, 3, "12") + advance(100)
    + entity_update(0, 1, "0,0.0,12") + advance(20) + entity_update(0, 1, "2,-1.0,5") + advance(200),
    "resubscribe-mid": registrations() + commands([3]) + entity_update(2, 2, "Cut", 1) + send(3) + subscribe(0x01)
    + written() + written() + subscribe(0x02) + written() * 3 + advance(20),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        os.remove(os.path.join(OUT, name))
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
