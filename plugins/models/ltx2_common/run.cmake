# ddo_ltx2_run: what both LTX-2 plugins do around the math on the model kit (the --prompt-embeds file, the text
# stage on the engine with ddo-host encode's output, engine-backed components viewed as ltx2::Weights).
ddo_ltx2_part(ddo_ltx2_run SOURCES src/run_stages.cpp LIBS ddo_ltx2_text ddo_ltx2_dit)
