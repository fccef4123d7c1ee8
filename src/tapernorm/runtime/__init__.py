"""What every command stands on; imports nothing else of tapernorm (torch only where named).

atomic      write a file or a directory all at once, or not at all
jsonio      the one JSON reader and writer (strict, sorted, atomic; a damaged file names itself)
markdown    the one markdown pipe-table writer (a cell's `|` escaped, its newline a space)
digests     SHA-256 of files and tensors, safetensors headers
out_dirs    output directories a command may claim: never remove what it did not write
out_files   output files (tables, figures) claimed the same way
progress    progress lines for long work (tqdm on a terminal, log lines otherwise)
device      the device and autocast a command runs on (torch)
provenance  what made a file: commit, host, versions, config hashes, stamps
"""
