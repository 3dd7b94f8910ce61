"""The Python baseline of benches/client_capacity.rs: the same method as sparkctl's client
(one streamed chat request per stream, SSE parsed line by line, every event's JSON decoded,
each token-bearing chunk timed on arrival, usage read from the last chunk), in asyncio with
aiohttp, the way Python benchmark clients are written.

usage: python aiohttp_client.py URL STREAMS TOKENS
Prints one JSON line per stream (id, sent_unix_us, ttft_ms, itl_ms, ok, error) and a last
line with this process's CPU time (getrusage: user + system) and wall time.
"""

import asyncio
import json
import resource
import sys
import time

import aiohttp


async def one(session, url, body):
    out = {"ok": False, "id": None, "ttft_ms": None, "itl_ms": [], "error": None, "completion_tokens": None}
    sent = time.perf_counter()
    out["sent_unix_us"] = int(time.time() * 1e6)
    last = None
    done = False
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                out["error"] = "HTTP %d" % resp.status
                return out
            buf = b""
            async for chunk in resp.content.iter_any():
                at = (time.perf_counter() - sent) * 1e3
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            done = True
                            continue
                        v = json.loads(data)
                        out["id"] = out["id"] or v.get("id")
                        if v.get("usage"):
                            out["completion_tokens"] = v["usage"].get("completion_tokens")
                        choices = v.get("choices") or []
                        if not choices:
                            continue
                        delta = choices[0].get("delta") or {}
                        text = delta.get("content") or delta.get("reasoning_content") or ""
                        if text or delta.get("tool_calls"):
                            if out["ttft_ms"] is None:
                                out["ttft_ms"] = at
                            elif last is not None:
                                out["itl_ms"].append(at - last)
                            last = at
    except Exception as e:  # noqa: BLE001 - every failure is reported, none hidden
        out["error"] = repr(e)
        return out
    out["ok"] = done
    return out


async def main(url, streams, tokens):
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Tell me about the history of the bicycle."}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        results = await asyncio.gather(*(one(session, url, body) for _ in range(streams)))
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    url, streams, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # From here on: the interpreter's start and the imports are not the client's work.
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter()
    asyncio.run(main(url, streams, tokens))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru.ru_utime + ru.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    print(json.dumps({"cpu_s": cpu, "wall_s": time.perf_counter() - wall}))
