"""A gRPC server and client for tests/proxy_h2.rs (Debian's python3-grpcio; messages are raw
bytes, so no generated code is needed).

    grpc_echo.py server            serves h2c on 127.0.0.1 and prints `port N`
    grpc_echo.py client ADDR [CA]  calls through ADDR (TLS when CA, a PEM for `localhost`);
                                   prints one `ok NAME` line per check, exits 1 on a failure

Methods of /test.Echo:
    Unary   echoes the message, with trailing metadata x-trailer: unary-ok; the message
            `fail` ends with INVALID_ARGUMENT "bad request: fail" and x-detail: why
    Bidi    echoes each message as it comes; trailing metadata x-count: N
    Slow    waits up to 10 s for the call to be cancelled, noting the deadline it saw
    LastSlow  what the last Slow call saw: `REMAINING CANCELLED`
"""

import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "test.Echo"
last_slow = {"remaining": None, "cancelled": threading.Event()}


def unary(request, context):
    if request == b"fail":
        context.set_trailing_metadata((("x-detail", "why"),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request: fail")
    context.set_trailing_metadata((("x-trailer", "unary-ok"),))
    return request


def bidi(requests, context):
    n = 0
    for r in requests:
        n += 1
        yield r
    context.set_trailing_metadata((("x-count", str(n)),))


def slow(request, context):
    last_slow["remaining"] = context.time_remaining()
    cancelled = last_slow["cancelled"]
    cancelled.clear()
    context.add_callback(cancelled.set)
    cancelled.wait(10)
    return b"too late"


def report(request, context):
    # The cancellation reaches the server a moment after the client gave up.
    last_slow["cancelled"].wait(3)
    return ("%s %s" % (last_slow["remaining"], last_slow["cancelled"].is_set())).encode()


def serve():
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "LastSlow": grpc.unary_unary_rpc_method_handler(report),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print("port %d" % port, flush=True)
    # Until the test kills it (or its stdin closes).
    sys.stdin.read()
    server.stop(0)


def check(name, cond, detail=""):
    if not cond:
        print("FAIL %s %s" % (name, detail), flush=True)
        sys.exit(1)
    print("ok %s" % name, flush=True)


def client(addr, ca=None):
    if ca:
        creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
        channel = grpc.secure_channel(
            addr, creds, options=(("grpc.ssl_target_name_override", "localhost"),)
        )
    else:
        channel = grpc.insecure_channel(addr)
    call = lambda m: channel.unary_unary("/%s/%s" % (SERVICE, m))

    resp, c = call("Unary").with_call(b"hello", timeout=10)
    check("unary", resp == b"hello", repr(resp))
    check("unary-status", c.code() == grpc.StatusCode.OK, c.code())
    check("unary-trailer", ("x-trailer", "unary-ok") in c.trailing_metadata(), c.trailing_metadata())

    try:
        call("Unary")(b"fail", timeout=10)
        check("error-status", False, "no error")
    except grpc.RpcError as e:
        check("error-status", e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.code())
        check("error-message", e.details() == "bad request: fail", e.details())
        check("error-trailer", ("x-detail", "why") in e.trailing_metadata(), e.trailing_metadata())

    # Bidirectional: each reply is read before the next message is sent, so the messages
    # cross the proxy both ways while the call is open; sizes up to 1 MB.
    sizes = [1, 100, 16384, 70000, 1 << 20, 5, 300000]
    outbox = []
    ready = threading.Semaphore(0)

    def messages():
        for i, n in enumerate(sizes):
            ready.acquire()
            msg = bytes([i % 251]) * n
            outbox.append(msg)
            yield msg

    ready.release()
    stream = channel.stream_stream("/%s/Bidi" % SERVICE)(messages(), timeout=20)
    got = 0
    for reply in stream:
        check("bidi-%d" % got, reply == outbox[got], "%d bytes" % len(reply))
        got += 1
        ready.release()
    check("bidi-all", got == len(sizes), got)
    check("bidi-trailer", ("x-count", str(len(sizes))) in stream.trailing_metadata(),
          stream.trailing_metadata())
    check("bidi-status", stream.code() == grpc.StatusCode.OK, stream.code())

    t0 = time.time()
    try:
        call("Slow")(b"x", timeout=0.5)
        check("deadline", False, "no error")
    except grpc.RpcError as e:
        check("deadline", e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e.code())
    check("deadline-time", time.time() - t0 < 3, time.time() - t0)
    seen = call("LastSlow")(b"", timeout=10).decode().split()
    remaining = float(seen[0])
    check("deadline-propagated", 0 < remaining <= 0.6, seen)
    check("backend-cancelled", seen[1] == "True", seen)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    else:
        client(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
