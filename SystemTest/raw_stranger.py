"""A stranger: a neighbour's controller driven by hand over the kernel's HCI user channel, so
that no bluetoothd (and no HID host of its) ever acts for it.

With the scenario's single bluetoothd managing the stranger's controller, that bluetoothd acted
on its own: after `btmgmt pair` it connected again and tried once more, and it tore a plain
`hcitool lecc` link down itself (reason 0x05) when its HID host met the accessory's encrypted
attributes, before ancsd's grace could. Here the stranger does exactly what the test says: an LE
connection to the accessory's public address, at most an SMP Pairing Request, and then nothing
but waiting for the link to end. ATT requests from the accessory's side go unanswered (its
bluetoothd gives up after 30 s, well after the grace being tested).
"""

import ctypes
import os
import select
import socket
import struct
import time

# From <bluetooth/bluetooth.h> and <bluetooth/hci.h>: not every Python is built with socket.AF_BLUETOOTH.
AF_BLUETOOTH, BTPROTO_HCI, HCI_CHANNEL_USER = 31, 1, 1
COMMAND, ACL, EVENT = 0x01, 0x02, 0x04
SMP_CID = 0x0006
RESET, SET_EVENT_MASK, LE_CREATE_CONNECTION = 0x0C03, 0x0C01, 0x200D
COMMAND_COMPLETE, COMMAND_STATUS, DISCONNECTION_COMPLETE, LE_META = 0x0E, 0x0F, 0x05, 0x3E


class Stranger:
    """Controller `index` taken from the kernel's Bluetooth stack (it must be powered off) and
    driven by hand; given back to the kernel when closed."""

    def __init__(self, index):
        self.sock = socket.socket(AF_BLUETOOTH, socket.SOCK_RAW | socket.SOCK_CLOEXEC, BTPROTO_HCI)
        # Python's bind takes only a device id for BTPROTO_HCI; the channel needs the C call.
        address = struct.pack("<HHH", AF_BLUETOOTH, index, HCI_CHANNEL_USER)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.bind(self.sock.fileno(), ctypes.c_char_p(address), len(address)) != 0:
            errno = ctypes.get_errno()
            self.sock.close()
            raise OSError(errno, f"bind hci{index} to the HCI user channel: {os.strerror(errno)}")
        self.smp = []  # the SMP PDUs received: (seconds since the link came up, code)
        self.connected = None
        self.command(RESET)
        self.command(SET_EVENT_MASK, (0x3FFFFFFFFFFFFFFF).to_bytes(8, "little"))

    def close(self):
        self.sock.close()

    def command(self, opcode, params=b"", timeout=5):
        """Sends a command and returns its Command Complete parameters or Command Status."""
        self.sock.send(struct.pack("<BHB", COMMAND, opcode, len(params)) + params)
        deadline = time.monotonic() + timeout
        while True:
            code, body = self.event(deadline - time.monotonic())
            if code == COMMAND_COMPLETE and int.from_bytes(body[1:3], "little") == opcode:
                return body[3:]
            if code == COMMAND_STATUS and int.from_bytes(body[2:4], "little") == opcode:
                return body[:1]

    def event(self, timeout):
        """The next HCI event (code, parameters) within `timeout` seconds. ACL data is read for
        its SMP PDUs and otherwise dropped: ATT requests go unanswered."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError("no HCI event in time")
            packet = self.sock.recv(1024)
            if packet[:1] == bytes([EVENT]) and len(packet) >= 3:
                return packet[1], packet[3:3 + packet[2]]
            if packet[:1] == bytes([ACL]) and len(packet) >= 10 and int.from_bytes(packet[7:9], "little") == SMP_CID:
                self.smp.append((time.monotonic() - (self.connected or 0), packet[9]))

    def connect(self, peer, timeout=30):
        """An LE connection to the public address `peer` ("AA:BB:…"); returns its handle."""
        peer_bytes = bytes.fromhex(peer.replace(":", ""))[::-1]
        params = struct.pack("<HHBB6sBHHHHHH", 0x0060, 0x0030, 0, 0, peer_bytes, 0, 0x0018, 0x0028, 0, 0x01F4, 0, 0)
        status = self.command(LE_CREATE_CONNECTION, params)
        if status[:1] != b"\0":
            raise OSError(f"LE Create Connection refused: status 0x{status[0]:02x}")
        deadline = time.monotonic() + timeout
        while True:
            code, body = self.event(deadline - time.monotonic())
            if code == LE_META and body[:1] in (b"\x01", b"\x0a"):
                if body[1] != 0:
                    raise OSError(f"LE connection failed: status 0x{body[1]:02x}")
                self.connected = time.monotonic()
                self.smp = []
                return int.from_bytes(body[2:4], "little")

    def ask_passkey_entry(self, handle):
        """Sends an SMP Pairing Request as a keyboard (KeyboardOnly, bonding and MITM required,
        legacy pairing): the accessory's side must display a passkey for the stranger to type."""
        pdu = bytes([0x01, 0x02, 0x00, 0x05, 16, 0x00, 0x01])
        l2cap = struct.pack("<HH", len(pdu), SMP_CID) + pdu
        self.sock.send(struct.pack("<BHH", ACL, handle & 0x0FFF, len(l2cap)) + l2cap)

    def wait_disconnected(self, handle, timeout):
        """Waits for the link to end; returns (seconds it lasted, the reason code)."""
        deadline = time.monotonic() + timeout
        while True:
            code, body = self.event(deadline - time.monotonic())
            if code == DISCONNECTION_COMPLETE and int.from_bytes(body[1:3], "little") == handle:
                return time.monotonic() - self.connected, body[3]
