// Drag and drop onto the upload form (progressive enhancement: the form works without this).
for (const form of document.querySelectorAll('form[data-drop]')) {
  const input = form.querySelector('input[type=file]');
  const zone = form.querySelector('.drop') || form;
  const on = (e) => { e.preventDefault(); zone.classList.add('over'); };
  const off = () => zone.classList.remove('over');
  zone.addEventListener('dragover', on);
  zone.addEventListener('dragenter', on);
  zone.addEventListener('dragleave', off);
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    off();
    if (!e.dataTransfer || e.dataTransfer.files.length === 0) return;
    input.files = e.dataTransfer.files;
    form.requestSubmit();
  });
}
