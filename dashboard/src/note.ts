// A study's or trial's note: shown as text (never HTML), with an editor
// for whoever may write it (the API decides: a refusal shows on the page).
import { ApiError } from './api';
import { h } from './dom';

export const NOTE_MAX = 2000;

export interface NoteView {
  el: HTMLElement;
  // A newer note from the server (a live event); ignored while editing.
  update(note: string): void;
}

export function noteView(testid: string, note: string, save: (text: string) => Promise<string>): NoteView {
  let current = note;
  let editing = false;
  const text = h('div', { class: 'note-text', 'data-testid': testid });
  const error = h('p', { class: 'error', 'data-testid': `${testid}-error` });
  const editButton = h('button', { 'data-testid': `${testid}-edit`, onclick: () => edit() }, 'Edit note');
  const el = h('div', { class: 'note' }, text, editButton, error);
  const show = () => {
    // textContent: a note is plain text whatever it holds.
    text.textContent = current;
    text.classList.toggle('empty', !current);
    if (!current) text.textContent = 'No note.';
  };
  const edit = () => {
    editing = true;
    error.textContent = '';
    const area = h('textarea', { 'data-testid': `${testid}-input`, maxlength: NOTE_MAX, rows: 4, cols: 80 }) as HTMLTextAreaElement;
    area.value = current;
    const done = () => {
      editing = false;
      el.replaceChildren(text, editButton, error);
      show();
    };
    const saveButton = h('button', {
      'data-testid': `${testid}-save`,
      onclick: async () => {
        try {
          current = await save(area.value);
          done();
        } catch (e) {
          error.textContent = e instanceof ApiError ? `${e.httpStatus} ${e.status}: ${e.message}` : String(e);
        }
      },
    }, 'Save');
    el.replaceChildren(area, h('div', {}, saveButton, ' ', h('button', { onclick: done }, 'Cancel')), error);
    area.focus();
  };
  show();
  return {
    el,
    update(note: string) {
      if (editing || note === current) return;
      current = note;
      show();
    },
  };
}
