"""The explorer: one self-contained HTML page per checkpoint, where the trained model runs in the browser.

`payload.py` gathers what the page needs from a checkpoint (config, vocabulary, weights, a
validation excerpt, the run's TensorBoard history); `page.py` inlines it with the scripts of
`static/` into one file. `static/model.js` is the forward pass of src/model/ in JavaScript.
"""
