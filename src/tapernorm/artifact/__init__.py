"""The artifact's own maintenance (not imported by users of the method).

doc_blocks  the generated blocks of README.md and docs/*.md (`tapernorm docs`)
reference   committed reference runs (`tapernorm snapshot`)
manifest    manifests of committed results (`tapernorm manifest`, `check-manifest`)
"""
