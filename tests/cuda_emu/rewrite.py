#!/usr/bin/env python3
"""Turns a .cu file into C++ the CUDA emulator (cuda_emu.h) compiles with the host compiler.

Four rewrites, nothing else:
- a launch `NAME<<<grid, block, smem, stream>>>(args);` becomes
  `::emu::launch(grid, block, smem, stream, ID, "NAME @ FILE:LINE", BODY)`, BODY calling NAME
  in every thread with the arguments evaluated once, at the launch, as the hardware's launch
  does (their pointers checked by ::emu::checked_args);
- a dynamic shared-memory declaration `extern __shared__ [__align__(N)] T name[];` becomes a
  pointer to the launch's dynamic shared memory;
- a static one, `__shared__ T a[N], b[M];`, is followed by `::emu::fresh_shared` calls that
  give each block NaN bytes in it;
- a kernel declared with `__launch_bounds__(N)` starts by checking that its block has at most
  N threads (a launch the hardware refuses).
`#include <mma.h>` is dropped (the emulator supplies nvcuda::wmma).

    rewrite.py IN.cu OUT.cpp
"""
import os
import re
import sys


def kernel_name_start(src, end):
    """Start of the kernel expression ending at `end` (just before '<<<'): an identifier,
    possibly qualified, with template arguments (balanced <...>)."""
    i = end
    if i > 0 and src[i - 1] == '>':  # template arguments: walk back to the matching '<'
        depth, i = 0, i - 1
        while i >= 0:
            if src[i] == '>':
                depth += 1
            elif src[i] == '<':
                depth -= 1
                if depth == 0:
                    break
            i -= 1
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in '_:'):
        j -= 1
    if j == i:
        raise SystemExit(f"rewrite.py: no kernel name before <<< at offset {end}")
    return j


def matching(src, i, open_ch, close_ch):
    """Index just past the bracket matching the one at src[i]."""
    depth = 0
    while i < len(src):
        if src[i] == open_ch:
            depth += 1
        elif src[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise SystemExit("rewrite.py: unbalanced brackets")


def rewrite_launches(src, path):
    out, pos = [], 0
    base = os.path.basename(path)
    while True:
        at = src.find('<<<', pos)
        if at < 0:
            out.append(src[pos:])
            return ''.join(out)
        start = kernel_name_start(src, at)
        cfg_end = src.find('>>>', at)
        config = src[at + 3:cfg_end]
        args_open = cfg_end + 3
        while src[args_open].isspace():
            args_open += 1
        if src[args_open] != '(':
            raise SystemExit(f"rewrite.py: no argument list after >>> at offset {cfg_end}")
        args_close = matching(src, args_open, '(', ')')
        name = src[start:at]
        args = src[args_open:args_close]
        parts = split_top_level(config)
        while len(parts) < 4:
            parts.append('0')
        out.append(src[pos:start])
        # a kernel pointer variable (`auto kernel = ...;`) also names the kernel, so the
        # emulator can check the shared memory it was allowed to use
        is_var = re.fullmatch(r'\w+', name) and re.search(r'\bauto\s+' + name + r'\s*=', src[:at])
        kid = f"(const void*)({name})" if is_var else 'nullptr'
        where = f"{' '.join(name.split())} @ {base}:{src.count(chr(10), 0, start) + 1}"
        out.append(f"::emu::launch({', '.join(parts)}, {kid}, \"{where}\", [&, emu_args = ::emu::checked_args(std::make_tuple{args})] "
                   f"{{ std::apply([&](const auto&... emu_a) {{ {name}(emu_a...); }}, emu_args); }})")
        out.append('\n' * (src[start:args_open].count('\n')))  # keep line numbers
        pos = args_close


def split_top_level(s):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in '([{<':
            depth += 1
        elif ch in ')]}>':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(''.join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if ''.join(cur).strip():
        parts.append(''.join(cur).strip())
    return parts


STATIC_SHARED = re.compile(r'(?<!extern )__shared__\s+([\w:<>]+)\s+([^;=]+);')


def fresh_static_shared(m):
    names = [re.match(r'\s*(\w+)', d).group(1) for d in split_top_level(m.group(2))]
    fills = ' '.join(f'::emu::fresh_shared(&{n}, sizeof {n});' for n in names)
    return f'{m.group(0)} {fills}'


def check_launch_bounds(src):
    """Inserts ::emu::check_launch_bounds(N) at the start of each kernel body declared with
    __launch_bounds__(N[, ...])."""
    out, pos = [], 0
    while True:
        at = src.find('__launch_bounds__(', pos)
        if at < 0:
            out.append(src[pos:])
            return ''.join(out)
        close = matching(src, at + len('__launch_bounds__'), '(', ')')
        bound = split_top_level(src[at + len('__launch_bounds__') + 1:close - 1])[0]
        params = src.index('(', close)
        body = src.index('{', matching(src, params, '(', ')'))
        out.append(src[pos:body + 1])
        out.append(f' ::emu::check_launch_bounds({bound});')
        pos = body + 1


SHARED = re.compile(r'extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:\s]+?)\s+(\w+)\s*\[\s*\]\s*;')


def main():
    src = open(sys.argv[1]).read()
    src = re.sub(r'#include\s*<mma\.h>', '// <mma.h>: nvcuda::wmma comes from cuda_emu.h', src)
    src = check_launch_bounds(src)
    src = STATIC_SHARED.sub(fresh_static_shared, src)
    src = SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = "
                     f"reinterpret_cast<{m.group(1)}*>(::emu::dynamic_smem());", src)
    src = rewrite_launches(src, sys.argv[1])
    with open(sys.argv[2], 'w') as f:
        f.write(f'#line 1 "{sys.argv[1]}"\n')
        f.write(src)


if __name__ == '__main__':
    main()
