"""Turn PTX text (stdin) into test/gpu/count_other_ptx.h (a C string)."""
import sys

ptx = sys.stdin.read()
lines = ['/* Generated from count_other.cu by ptx_to_header.py: do not edit. */',
         'static const char count_other_ptx[] =']
for line in ptx.splitlines():
    lines.append('    "%s\\n"' % line.replace('\\', '\\\\').replace('"', '\\"'))
lines[-1] += ';'
open(__file__.replace('ptx_to_header.py', 'count_other_ptx.h'), 'w').write('\n'.join(lines) + '\n')
