#!/usr/bin/python3
# rpc_interop.py - a msgpack-rpc client not written in C (python3-msgpack)
# talking to `toolhost serve` over its Unix socket.  Run by the rpc suite:
#   rpc_interop.py /path/to/socket
# Prints one line per check and "interop: ok" at the end; exits 1 on the
# first failed check.
#   rpc_interop.py --view /path/to/socket TOOL ARGS_JSON
# prints, as one JSON line, what this connection sees: the names from
# tools.list, tools.describe TOOL (the error, if any) and tools.call TOOL
# ARGS (the access-control test runs it as another user).
import json
import socket
import sys

import msgpack


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False)
        self.msgid = 0
        self.notes = []
        self.responses = {}

    def send(self, obj):
        self.sock.sendall(msgpack.packb(obj, use_bin_type=True))

    def request(self, method, params):
        self.msgid += 1
        self.send([0, self.msgid, method, params])
        return self.msgid

    def read_one(self):
        while True:
            for msg in self.unpacker:
                return msg
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("server closed the connection")
            self.unpacker.feed(data)

    def wait(self, msgid):
        while msgid not in self.responses:
            msg = self.read_one()
            if msg[0] == 1:
                self.responses[msg[1]] = (msg[2], msg[3])
            elif msg[0] == 2:
                self.notes.append((msg[1], msg[2]))
            elif msg[0] == 0:  # permission.request: say no
                self.send([1, msg[1], None, False])
        return self.responses.pop(msgid)

    def call(self, method, params):
        return self.wait(self.request(method, params))


def check(cond, what):
    if not cond:
        print("FAILED: " + what)
        sys.exit(1)
    print("ok: " + what)


def main():
    c = Client(sys.argv[1])
    # Some clients announce themselves with a notification: ignored.
    c.send([2, "client.hello", ["python"]])
    err, res = c.call("host.ping", [])
    check(err is None and res == "pong", "host.ping")

    err, tools = c.call("tools.list", [])
    names = [t["name"] for t in tools]
    check(err is None and "echo" in names, "tools.list has echo")
    echo = [t for t in tools if t["name"] == "echo"][0]
    check(echo["parameters"]["type"] == "object" and
          "text" in echo["parameters"]["properties"], "echo's schema")

    err, res = c.call("tools.call", ["echo", {"text": "hi from python"}])
    check(err is None and res["ok"] is True and
          res["stdout"].rstrip("\n") == "hi from python", "tools.call echo")

    # The method as bin instead of str.
    c.msgid += 1
    c.send([0, c.msgid, b"host.ping", []])
    err, res = c.wait(c.msgid)
    check(err is None and res == "pong", "method as bin")

    # A tool error is a result.
    err, res = c.call("tools.call", ["echo", {}])
    check(err is None and res["ok"] is False and
          res["error"]["code"] == "invalid_arguments", "tool error as result")

    err, res = c.call("no.such.method", [])
    check(res is None and isinstance(err, list) and len(err) == 2 and
          isinstance(err[0], int) and "no.such.method" in err[1],
          "unknown method is an error response")

    err, res = c.call("tools.call", "not an array")
    check(res is None and err is not None, "wrong shape is an error response")

    # Pipelining: ten requests written at once, answered by msgid.
    ids = [c.request("tools.call", ["echo", {"text": "p%d" % i}])
           for i in range(10)]
    for i, mid in enumerate(ids):
        err, res = c.wait(mid)
        check(err is None and res["stdout"].rstrip("\n") == "p%d" % i,
              "pipelined call %d" % i)

    # An async task: acknowledged, then progress and task.done.
    err, res = c.call("tools.call", ["echo_async",
                                     {"text": "later", "steps": 2,
                                      "delay_ms": 20}])
    check(err is None and res.get("status") == "running", "async ack")
    task = res["task_id"]
    while not any(n[0] == "task.done" and n[1][0] == task for n in c.notes):
        msg = c.read_one()
        if msg[0] == 2:
            c.notes.append((msg[1], msg[2]))
    done = [n for n in c.notes if n[0] == "task.done"][0]
    check(done[1][1]["ok"] is True and
          done[1][1]["stdout"].rstrip("\n") == "later", "task.done")
    err, res = c.call("tasks.result", [task])
    check(err is None and res["ok"] is True, "tasks.result")

    err, res = c.call("host.stats", [])
    check(err is None and res["connections"]["current"] >= 1, "host.stats")
    print("interop: ok")


def view(path, tool, args):
    c = Client(path)
    _, tools = c.call("tools.list", [])
    derr, _ = c.call("tools.describe", [tool])
    cerr, res = c.call("tools.call", [tool, json.loads(args)])

    def text(v):
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    out = {"tools": [t["name"] for t in tools],
           "describe_error": derr, "call_error": cerr,
           "call": {k: text(v) for k, v in res.items()} if res else None}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--view":
        view(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        main()
