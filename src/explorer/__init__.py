"""The explorer: one self-contained HTML page per checkpoint (page.py; the payload from payload.py), where the
trained model runs in the browser (static/model.js is the forward pass of src/model/ in JavaScript)."""
